-- get: KEYS record.
-- Returns the fields s, f, t, c, e, l, d, r of the live record, or nil.
local function get(k)
  local found = redis.call('HMGET', KEYS[k], 's', 'f', 't', 'c', 'e', 'l', 'd', 'r')
  if not found[1] or now >= num(found[5], 'e') then
    return false
  end
  return found
end

