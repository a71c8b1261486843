-- One POST of a 52-byte JSON payment, built afresh for every request, with a request id unique
-- across wrk's threads (thread id prefix) and across runs (start time). The argument after `--`
-- says what the Idempotency-Key is:
--
--   wrk -s bench/wrk/payment.lua URL -- none     no key: the gateway forwards it untouched
--   wrk -s bench/wrk/payment.lua URL -- unique   a new key per request: every one executes
--   wrk -s bench/wrk/payment.lua URL -- same     one key for all: after the first, replays
--
-- Every configuration builds its requests the same way (the id header is there in all three), so
-- wrk spends the same CPU per request in each: on a shared machine, a cheaper static request in
-- the baseline would leave it more of the cores than the configurations it is compared with.
local mode = "none"
local prefix = ""
local counter = 0
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("id", threads)
end

function init(args)
  mode = args[1] or "none"
  if mode ~= "none" and mode ~= "unique" and mode ~= "same" then
    error("payment.lua: the key mode is none, unique or same, not " .. mode)
  end
  prefix = string.format("%d-%s-", os.time(), id or "t")
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.body = '{"amount":1000,"currency":"eur","source":"tok_visa"}'
  if mode == "same" then
    wrk.headers["Idempotency-Key"] = "bench-replay-key"
  end
end

function request()
  counter = counter + 1
  local id = prefix .. counter
  wrk.headers["X-Request-Id"] = id
  if mode == "unique" then
    wrk.headers["Idempotency-Key"] = id
  end
  return wrk.format()
end
