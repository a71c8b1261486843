-- release: KEYS record, fence; ARGV now, token, publish command, channel.
-- Returns 1, or 0 when the token does not hold the record.
local record, fence = KEYS[1], KEYS[2]
local expires_at = holder_expiry(record, ARGV[2])
if not expires_at then
  return 0
end
redis.call('DEL', record)
keep_fence(fence, ARGV[2], expires_at)
redis.call(ARGV[3], ARGV[4], 'released')
return 1
