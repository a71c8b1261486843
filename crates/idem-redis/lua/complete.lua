-- complete: KEYS record; ARGV token, ttl ms, response, channel.
-- Returns 1, or 0 when the token does not hold the record.
local function complete(k, a)
  local record = KEYS[k]
  local held, watched = holder_expiry(record, ARGV[a])
  if not held then
    return 0
  end
  local expires_at = now + tonumber(ARGV[a + 1])
  redis.call('HSET', record, 's', COMPLETED, 'r', ARGV[a + 2], 'd', int(now), 'e', int(expires_at))
  expire_at(record, expires_at)
  announce(watched, ARGV[a + 3], 'completed')
  return 1
end
