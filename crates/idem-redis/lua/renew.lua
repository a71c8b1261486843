-- renew: KEYS record; ARGV now, token, lease ms.
-- Returns the new lease_until, or nil when the token does not hold the record.
local record = KEYS[1]
local expires_at = holder_expiry(record, ARGV[2])
if not expires_at then
  return false
end
local lease_until = now + tonumber(ARGV[3])
redis.call('HSET', record, 'l', int(lease_until))
if lease_until > expires_at then
  redis.call('HSET', record, 'e', int(lease_until))
  expire_at(record, lease_until)
end
return lease_until
