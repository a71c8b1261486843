-- purge (under a test clock only): KEYS record, fence.
-- Returns 1 when the record had expired and was removed, else 0.
local function purge(k)
  local record, fence = KEYS[k], KEYS[k + 1]
  local found = redis.call('HMGET', record, 't', 'e')
  if not found[2] then
    return 0
  end
  local expires_at = num(found[2], 'e')
  if now < expires_at then
    return 0
  end
  redis.call('DEL', record)
  keep_fence(fence, int(num(found[1], 't')), expires_at)
  return 1
end

