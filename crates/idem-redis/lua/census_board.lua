-- census_board: claims the next census, or posts one, on the board of a prefix: the hash
-- KEYS[1], with the current claim (`c` claimant, `u` until) and the census last posted (`a` at,
-- `n` next due, `p` processing, `d` completed, `o` the oldest processing record's created_at,
-- absent when there was none). The rules are idem_core's `census::Board`'s.
-- ARGV: the time override (empty for the server's clock), 'claim' or 'post', the claimant,
-- then for a claim the hold in ms; for a post the rest in ms, processing, completed, oldest
-- (empty when none). Each write keeps the board a day past its claim or its next census, so that
-- a prefix no longer used leaves nothing behind.
-- Returns {yes, retry_after, a, n, p, d, o}: yes is 1 when the claimant counts now (a claim) or
-- the census was posted (a post); retry_after the ms until a waiting claimant claims again;
-- then the census posted before this call (nil fields when there is none).

local DAY = 86400000
local now = time_of(ARGV[1])
local op, me = ARGV[2], ARGV[3]
local board = redis.call('HMGET', KEYS[1], 'c', 'u', 'a', 'n', 'p', 'd', 'o')
local claimant, claimed_until = board[1], tonumber(board[2])
local next_due = tonumber(board[4])
local function answer(yes, retry_after)
  return {yes, retry_after, board[3], board[4], board[5], board[6], board[7]}
end

if op == 'claim' then
  if claimant and claimant ~= me and now < claimed_until then
    return answer(0, claimed_until - now)
  end
  if claimant ~= me and next_due and now < next_due then
    return answer(0, next_due - now)
  end
  redis.call('HSET', KEYS[1], 'c', me, 'u', now + tonumber(ARGV[4]))
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]) + DAY)
  return answer(1, 0)
elseif op == 'post' then
  if claimant ~= me then
    return answer(0, 0)
  end
  redis.call('HDEL', KEYS[1], 'c', 'u', 'o')
  redis.call('HSET', KEYS[1], 'a', now, 'n', now + tonumber(ARGV[4]), 'p', ARGV[5], 'd', ARGV[6])
  if ARGV[7] ~= '' then
    redis.call('HSET', KEYS[1], 'o', ARGV[7])
  end
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]) + DAY)
  return answer(1, 0)
end
error({err = 'IDEMCORRUPT unknown census board operation ' .. tostring(op)})
