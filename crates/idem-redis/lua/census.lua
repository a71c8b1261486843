-- census: counts the live records of one SCAN step. No KEYS; ARGV the time override (empty for
-- the server's clock), then the step's record keys.
-- Returns {processing, completed, oldest}: the live records in each state, and the created_at
-- of the oldest processing one (nil when there is none).

local now = time_of(ARGV[1])
local processing, completed, oldest = 0, 0, false
for i = 2, #ARGV do
  local found = redis.call('HMGET', ARGV[i], 's', 'c', 'e')
  if found[1] and now < num(found[3], 'e') then
    if found[1] == PROCESSING then
      processing = processing + 1
      local created_at = num(found[2], 'c')
      if not oldest or created_at < oldest then
        oldest = created_at
      end
    elseif found[1] == COMPLETED then
      completed = completed + 1
    else
      error({err = 'IDEMCORRUPT the record has the unknown state ' .. found[1]})
    end
  end
end
return {processing, completed, oldest}
