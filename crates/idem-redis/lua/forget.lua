-- forget: KEYS record, fence; ARGV now, publish command, channel.
-- Returns 1 when a live record was removed, else 0.
local record, fence = KEYS[1], KEYS[2]
local found = redis.call('HMGET', record, 't', 'e')
if not found[1] then
  return 0
end
local expires_at = num(found[2], 'e')
redis.call('DEL', record)
keep_fence(fence, int(num(found[1], 't')), expires_at)
if now >= expires_at then
  return 0
end
redis.call(ARGV[2], ARGV[3], 'forgotten')
return 1
