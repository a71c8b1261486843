-- renew: KEYS record; ARGV token, lease ms.
-- Returns the new lease_until, or nil when the token does not hold the record.
local function renew(k, a)
  local record = KEYS[k]
  local expires_at = holder_expiry(record, ARGV[a])
  if not expires_at then
    return false
  end
  local lease_until = now + tonumber(ARGV[a + 1])
  redis.call('HSET', record, 'l', int(lease_until))
  if lease_until > expires_at then
    redis.call('HSET', record, 'e', int(lease_until))
    expire_at(record, lease_until)
  end
  return lease_until
end

