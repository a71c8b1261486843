-- forget: KEYS record, fence; ARGV channel.
-- Removes the record and the parts of its execution and of the last one removed early.
-- Returns 1 when a live record was removed, else 0.
local function forget(k, a)
  local record, fence = KEYS[k], KEYS[k + 1]
  local found = redis.call('HMGET', record, 't', 'e', 'w')
  forget_parts(record, fence, found[1])
  if not found[1] then
    return 0
  end
  local expires_at = num(found[2], 'e')
  redis.call('DEL', record)
  keep_fence(fence, int(num(found[1], 't')), expires_at)
  if now >= expires_at then
    return 0
  end
  announce(found[3] == '1', ARGV[a], 'forgotten')
  return 1
end

