-- The parts of a streamed response (`append_part`, `read_parts`, `discard_parts`, and their
-- purge under a test clock).
--
-- The parts of one execution are a list under `{prefix:HEX}:parts:TOKEN`, the record key
-- followed by the execution's token, so in the record's slot: element 0 is the list's expiry
-- (ms, decimal), then part 0, part 1, … The expiry is the record's expires_at at the latest
-- append, which is at least that of every earlier append (a record's expiry only grows while
-- one token holds it); the key expires then (`expire_at`), and a list whose expiry has passed is
-- absent for every operation, whether or not Redis has removed the key yet.

-- The most parts one read returns, and how many it takes from the list at a time.
local MAX_READ, READ_CHUNK = 256, 16

-- The parts list of `record`'s execution `token` (a decimal string, as the record's `t` field
-- and the fence key hold it).
local function parts_key(record, token)
  return record .. ':parts:' .. token
end

-- The number of parts in the live list `parts`, or nil when there is none (no key, or its time
-- has passed).
local function live_parts(parts)
  local head = redis.call('LINDEX', parts, 0)
  if not head or now >= num(head, 'parts expiry') then
    return nil
  end
  return redis.call('LLEN', parts) - 1
end

-- append_part: KEYS record, parts; ARGV token, index, part, channel.
-- Returns {1} (stored, or stored before), {0} when the token does not hold the record, or
-- {2, next} when the index is past the next part's.
local function append_part(k, a)
  local record, parts = KEYS[k], KEYS[k + 1]
  local expires_at, watched = holder_expiry(record, ARGV[a])
  if not expires_at then
    return {0}
  end
  local index, count = tonumber(ARGV[a + 1]), 0
  local head = redis.call('LINDEX', parts, 0)
  if head then
    if now < num(head, 'parts expiry') then
      count = redis.call('LLEN', parts) - 1
    else
      -- Its time passed before the record's (renewed since the last append): gone.
      redis.call('DEL', parts)
    end
  end
  if index < count then
    return {1}
  end
  if index > count then
    return {2, count}
  end
  if count == 0 then
    redis.call('RPUSH', parts, int(expires_at), ARGV[a + 2])
  else
    redis.call('LSET', parts, 0, int(expires_at))
    redis.call('RPUSH', parts, ARGV[a + 2])
  end
  expire_at(parts, expires_at)
  announce(watched, ARGV[a + 3], 'appended')
  return {1}
end

-- read_parts: KEYS parts; ARGV from, max bytes.
-- Returns the parts from index `from` on, in order: as many as fit in max bytes but at least
-- one, at most MAX_READ; none when the list is absent.
local function read_parts(k, a)
  local parts = KEYS[k]
  local count = live_parts(parts)
  local from, room = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local found, bytes = {}, 0
  if not count then
    return found
  end
  local last = math.min(count, from + MAX_READ) - 1
  -- Element i + 1 holds part i. Chunks, so that a read of a few large parts does not copy
  -- MAX_READ of them into the script.
  for first = from, last, READ_CHUNK do
    local chunk = redis.call('LRANGE', parts, first + 1, math.min(first + READ_CHUNK - 1, last) + 1)
    for _, part in ipairs(chunk) do
      if #found > 0 and bytes + #part > room then
        return found
      end
      bytes = bytes + #part
      found[#found + 1] = part
    end
  end
  return found
end

-- discard_parts: KEYS parts. Returns 1.
local function discard_parts(k)
  redis.call('DEL', KEYS[k])
  return 1
end

-- Removes the lists of `record`'s current execution and of the last one removed early (the
-- fence's), the only tokens the address still knows: those of executions taken over earlier
-- expire with their lists.
local function forget_parts(record, fence, token)
  local fenced = redis.call('GET', fence)
  if fenced then
    redis.call('DEL', parts_key(record, fenced))
  end
  if token then
    redis.call('DEL', parts_key(record, token))
  end
end

-- purge_parts (under a test clock only): KEYS parts; ARGV the most parts to remove.
-- Returns how many parts it removed: those of the list if its time has passed, at most the
-- limit (the rest stay, as unreadable as before, for the next purge).
local function purge_parts(k, a)
  local parts, limit = KEYS[k], tonumber(ARGV[a])
  local head = redis.call('LINDEX', parts, 0)
  if not head or now < num(head, 'parts expiry') then
    return 0
  end
  local count = redis.call('LLEN', parts) - 1
  if count <= limit then
    redis.call('DEL', parts)
    return count
  end
  redis.call('LTRIM', parts, 0, count - limit)
  return limit
end

