-- POST with a new Idempotency-Key on every request: every request is a first execution.
-- Keys are unique across wrk's threads (thread id prefix) and across runs (start time).
local counter = 0
local prefix = ""

local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("id", threads)
end

function init(args)
  prefix = string.format("%d-%s-", os.time(), id or "t")
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.body = '{"amount":1000,"currency":"eur","source":"tok_visa"}'
end

function request()
  counter = counter + 1
  wrk.headers["Idempotency-Key"] = prefix .. counter
  return wrk.format()
end
