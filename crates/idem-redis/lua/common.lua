-- What the operations share: the clock, expiry and fencing.
--
-- Each operation is a function of `k` and `a`, the positions of its first key in KEYS and of its
-- first argument in ARGV, and returns its reply.

-- Under a test clock, keys outlive their record's expiry by this much real time, so that Redis
-- never removes a record that the test's clock still sees live.
local TEST_EXPIRY_MARGIN = 60000

local now, test_clock, server_now
-- The command that announces a change: PUBLISH, or SPUBLISH on a cluster.
local PUBLISH = ARGV[1]

-- Sets `now` for the next operation: the server's TIME (read once per script) when `override`
-- is empty, as in production, or the time in ms that a test driving a manual clock sent.
local function set_clock(override)
  if override == '' then
    if not server_now then
      server_now = server_time()
    end
    now, test_clock = server_now, false
  else
    now, test_clock = tonumber(override), true
  end
end

-- Gives a key the expiry of its record, so that Redis removes it then by itself.
local function expire_at(key, expires_at)
  if test_clock then
    redis.call('PEXPIRE', key, int(math.max(expires_at - now, 0) + TEST_EXPIRY_MARGIN))
  else
    redis.call('PEXPIREAT', key, int(expires_at))
  end
end

-- The next fencing token of the address: above the token of the record still in the key (live
-- or not) and above the fence left by one removed early, and never below now * 1024 + the
-- address's spread (10 bits of a hash of its key). So tokens exceed every token issued before
-- the fence and the record expired, even after a restart that lost them, as long as the
-- server's clock does not go back; and tokens issued in one millisecond to different addresses
-- differ unless their spreads collide. Exact in Lua's doubles until the year 2248.
local function next_token(record, record_token, fence)
  local last = math.max(tonumber(record_token) or 0, tonumber(redis.call('GET', fence)) or 0)
  local spread = tonumber(string.sub(redis.sha1hex(record), 1, 3), 16) % 1024
  return math.max(last + 1, now * 1024 + spread)
end

-- Keeps the token of a record removed before its expiry (released, forgotten, purged) for as
-- long as the record would have lived.
local function keep_fence(fence, token, expires_at)
  redis.call('SET', fence, token)
  expire_at(fence, math.max(expires_at, now + 1))
end

-- The expiry of the live processing record held by `token`, and whether it is watched; or nil.
local function holder_expiry(record, token)
  local found = redis.call('HMGET', record, 's', 't', 'e', 'w')
  if found[1] ~= PROCESSING or found[2] ~= token then
    return nil
  end
  local expires_at = num(found[3], 'e')
  if now >= expires_at then
    return nil
  end
  return expires_at, found[4] == '1'
end

-- Announces a change of a record on `channel`, if somebody may wait for it: only an acquire
-- that answered "in flight" marks a record watched (`w`), and a waiter subscribes before that
-- acquire (see `changed` in the store), so a record nobody saw in flight costs no message.
local function announce(watched, channel, change)
  if watched then
    redis.call(PUBLISH, channel, change)
  end
end

