-- release: KEYS record, fence; ARGV token, channel.
-- Returns 1, or 0 when the token does not hold the record.
local function release(k, a)
  local record, fence = KEYS[k], KEYS[k + 1]
  local expires_at, watched = holder_expiry(record, ARGV[a])
  if not expires_at then
    return 0
  end
  redis.call('DEL', record)
  keep_fence(fence, ARGV[a], expires_at)
  announce(watched, ARGV[a + 1], 'released')
  return 1
end

