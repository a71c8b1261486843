-- acquire: KEYS record, fence; ARGV fingerprint, lease ms, ttl ms, scope, key's SHA-256.
-- Returns {1, token, lease_until, took_over} | {2, response} | {3, retry_after ms} | {4}.
local function acquire(k, a)
  local record, fence = KEYS[k], KEYS[k + 1]
  local fingerprint, lease, ttl = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local found = redis.call('HMGET', record, 's', 'f', 'e', 'l', 't', 'w')
  local state, lease_until = found[1], now + lease

  if state and now < num(found[3], 'e') then
    if found[2] ~= fingerprint then
      return {4}
    end
    if state == COMPLETED then
      return {2, redis.call('HGET', record, 'r')}
    end
    if state ~= PROCESSING then
      error({err = 'IDEMCORRUPT the record has the unknown state ' .. state})
    end
    local held_until = num(found[4], 'l')
    if now < held_until then
      if found[6] ~= '1' then
        redis.call('HSET', record, 'w', '1')
      end
      return {3, held_until - now}
    end
    local token = next_token(record, found[5], fence)
    local expires_at = math.max(num(found[3], 'e'), lease_until)
    redis.call('HSET', record, 't', int(token), 'l', int(lease_until), 'e', int(expires_at))
    expire_at(record, expires_at)
    return {1, token, lease_until, 1}
  end

  local token = next_token(record, found[5], fence)
  local expires_at = now + math.max(ttl, lease)
  if state then
    redis.call('DEL', record)
  end
  redis.call('HSET', record, 's', PROCESSING, 'f', fingerprint, 't', int(token), 'c', int(now),
    'e', int(expires_at), 'l', int(lease_until), 'a', ARGV[a + 3], 'k', ARGV[a + 4])
  expire_at(record, expires_at)
  return {1, token, lease_until, 0}
end

