-- The start of every idem script: a record's encoding, and reading it.
--
-- A record is a hash under its record key:
--   s  state: 1 processing, 2 completed     f  fingerprint (32 bytes)
--   t  fencing token (decimal)              c  created_at (ms since the epoch)
--   e  expires_at (ms)                      l  lease_until (ms; read while processing only)
--   d  completed_at (ms, completed only)    r  encoded response (completed only)
--   w  1 once an acquire answered "in flight": someone may wait for the record to change
--   a  the scope (32 bytes)                 k  SHA-256 of the key (32 bytes)
-- Only the operators' listing reads `a` and `k` (the record key is a one-way hash of the scope
-- and key); records written by versions without them lack them.
-- A completion leaves `l` in place (removing it would cost a command per key): nothing reads it
-- once the record is completed.
-- A record whose expires_at has passed is absent for every operation, whether or not Redis has
-- removed the key yet.

local PROCESSING, COMPLETED = '1', '2'

-- Integers as decimal text: `tostring` would print 1.8e+15 for a token.
local function int(n)
  return string.format('%d', n)
end

local function num(value, field)
  local n = tonumber(value)
  if not n then
    error({err = 'IDEMCORRUPT the record field ' .. field .. ' is not a number'})
  end
  return n
end

-- The server's TIME in ms.
local function server_time()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- The time in ms a test driving a manual clock sent, or the server's when `override` is empty.
local function time_of(override)
  if override == '' then
    return server_time()
  end
  return tonumber(override)
end
