-- The script's body: runs a batch of operations, in order, and returns each one's reply in its
-- place. An operation that fails (an unreadable record) has an error reply in its place; the
-- others are unaffected, as if each had been a script of its own.
--
-- KEYS: each operation's keys, one operation after the other.
-- ARGV[1]: the publish command (PUBLISH, or SPUBLISH on a cluster). Then, for each operation:
-- its code, its time override (empty for the server's clock) and its arguments.

-- Each operation's function, and how many keys and arguments it takes.
local OPERATIONS = {
  a = {acquire, 2, 5},
  c = {complete, 1, 4},
  r = {release, 2, 2},
  n = {renew, 1, 2},
  g = {get, 1, 0},
  f = {forget, 2, 1},
  p = {purge, 2, 0},
  pa = {append_part, 2, 4},
  pr = {read_parts, 1, 2},
  pd = {discard_parts, 1, 0},
  pp = {purge_parts, 1, 1},
}

-- An operation's error as an error reply. Redis's errors and idem's start with their code
-- ('WRONGTYPE …', 'IDEMCORRUPT …'); anything else is a fault of the script, which Redis would
-- report as ERR.
local function error_reply(e)
  if type(e) == 'table' then
    e = e.err
  end
  e = tostring(e)
  if not string.find(e, '^%u+ ') then
    e = 'ERR ' .. e
  end
  return {err = e}
end

local replies, n, k, a = {}, 0, 1, 2
while a <= #ARGV do
  local operation = OPERATIONS[ARGV[a]]
  set_clock(ARGV[a + 1])
  local ok, reply = pcall(operation[1], k, a + 2)
  if not ok then
    reply = error_reply(reply)
  end
  n = n + 1
  replies[n] = reply
  k, a = k + operation[2], a + 2 + operation[3]
end
return replies
