-- complete: KEYS record; ARGV token, ttl ms, response, channel.
-- Returns 1, or 0 when the token does not hold the record.
local function complete(k, a)
  local record = KEYS[k]
  if not holder_expiry(record, ARGV[a]) then
    return 0
  end
  local expires_at = now + tonumber(ARGV[a + 1])
  redis.call('HDEL', record, 'l')
  redis.call('HSET', record, 's', COMPLETED, 'r', ARGV[a + 2], 'd', int(now), 'e', int(expires_at))
  expire_at(record, expires_at)
  redis.call(PUBLISH, ARGV[a + 3], 'completed')
  return 1
end

