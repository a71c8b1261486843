-- complete: KEYS record; ARGV now, token, ttl ms, response, publish command, channel.
-- Returns 1, or 0 when the token does not hold the record.
local record = KEYS[1]
if not holder_expiry(record, ARGV[2]) then
  return 0
end
local expires_at = now + tonumber(ARGV[3])
redis.call('HDEL', record, 'l')
redis.call('HSET', record, 's', COMPLETED, 'r', ARGV[4], 'd', int(now), 'e', int(expires_at))
expire_at(record, expires_at)
redis.call(ARGV[5], ARGV[6], 'completed')
return 1
