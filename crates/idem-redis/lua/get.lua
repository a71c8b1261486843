-- get: KEYS record; ARGV now.
-- Returns the fields s, f, t, c, e, l, d, r of the live record, or nil.
local found = redis.call('HMGET', KEYS[1], 's', 'f', 't', 'c', 'e', 'l', 'd', 'r')
if not found[1] or now >= num(found[5], 'e') then
  return false
end
return found
