-- list: the records of one SCAN step that a listing admits. No KEYS; ARGV the time override
-- (empty for the server's clock), the state ('' for any, or its code), the scope ('' for any, or
-- its 32 bytes), the least age in ms ('' for any), after ('' or the 16 hex digits of a
-- position), room, whole ('1' or ''), then the step's record keys, sorted.
-- A key's position is the first 16 hex digits of the digest in its name, `{prefix:DIGEST}`: the
-- keys at or before `after` were listed by an earlier page.
-- Returns {now, admitted, last, fields…}: how many of the keys past `after` hold a live record
-- that has its scope and key digest and passes the filters, the position of the last record
-- returned (nil when none), then at most `room` of those admitted records, each as its fields
-- s, f, t, c, e, l, d, r, a, k; none at all when `whole` is '1' and more than `room` are
-- admitted, so that a page that cannot take the step whole does not read the responses it will
-- not return.

local now = time_of(ARGV[1])
local state, scope, age = ARGV[2], ARGV[3], ARGV[4]
local after, room, whole = ARGV[5], tonumber(ARGV[6]), ARGV[7] == '1'
local created_by = age ~= '' and now - tonumber(age)

local admitted = {}
local function position(key)
  return string.sub(key, #key - 64, #key - 49)
end

for i = 8, #ARGV do
  local found = redis.call('HMGET', ARGV[i], 's', 'c', 'e', 'a', 'k')
  if (after == '' or position(ARGV[i]) > after)
      and found[4] and found[5] and now < num(found[3], 'e')
      and (state == '' or found[1] == state)
      and (scope == '' or found[4] == scope)
      and (not created_by or num(found[2], 'c') <= created_by) then
    admitted[#admitted + 1] = ARGV[i]
  end
end

local reply = {now, #admitted, false}
if not whole or #admitted <= room then
  for i = 1, math.min(#admitted, room) do
    reply[#reply + 1] =
      redis.call('HMGET', admitted[i], 's', 'f', 't', 'c', 'e', 'l', 'd', 'r', 'a', 'k')
    reply[3] = position(admitted[i])
  end
end
return reply
