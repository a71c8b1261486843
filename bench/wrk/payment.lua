-- One POST of a 52-byte JSON payment, built afresh for every request, with a request id unique
-- across wrk's threads (thread id prefix) and across runs (start time and a random tag). The
-- first argument after `--` says what the Idempotency-Key is:
--
--   wrk -s bench/wrk/payment.lua URL -- none     no key: the gateway forwards it untouched
--   wrk -s bench/wrk/payment.lua URL -- unique   a new key per request: every one executes
--   wrk -s bench/wrk/payment.lua URL -- same     one key for all: after the first, replays
--
-- Two more, both optional (0 for the default):
--
--   wrk -s bench/wrk/payment.lua URL -- unique 16384          a JSON body of 16384 bytes
--   wrk -s bench/wrk/payment.lua URL -- unique 0 50000        each thread sends 50000 at most
--
-- A larger body is the payment with line items (objects with keys to sort, numbers and strings,
-- as an API's documents have, so that the gateway's JSON fingerprint does real work) and a note
-- that pads it to the exact size. A thread that has sent its most stops; wrk itself still waits
-- for its duration to end.
--
-- Every configuration builds its requests the same way (the id header is there in all three), so
-- wrk spends the same CPU per request in each: on a shared machine, a cheaper static request in
-- the baseline would leave it more of the cores than the configurations it is compared with.
local mode = "none"
local prefix = ""
local counter = 0
local limit = 0
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("id", threads)
end

-- body(size): the payment, padded with line items and a note to `size` bytes (at least the
-- payment's 52).
local function body(size)
  local payment = '{"amount":1000,"currency":"eur","source":"tok_visa"'
  local head, tail = payment .. ',"items":[', '],"note":"'
  if size < #head + #tail + 2 then
    return payment .. "}"
  end
  local items, length, n = {}, #head + #tail + 2, 0
  local item = '{"sku":"sku-%06d","quantity":%d,"unit_amount":%d,"description":"line item %d"}'
  while true do
    local next_item = string.format(item, n, n % 7 + 1, 100 + n % 900, n)
    local separator = n > 0 and 1 or 0
    if length + separator + #next_item > size then
      break
    end
    n = n + 1
    items[n] = next_item
    length = length + separator + #next_item
  end
  return head .. table.concat(items, ",") .. tail .. string.rep("x", size - length) .. '"}'
end

-- A random tag, so that two runs started in the same second never share a key.
local function tag()
  local urandom = io.open("/dev/urandom", "rb")
  local bytes = urandom:read(4)
  urandom:close()
  return string.format("%02x%02x%02x%02x", bytes:byte(1, 4))
end

function init(args)
  mode = args[1] or "none"
  if mode ~= "none" and mode ~= "unique" and mode ~= "same" then
    error("payment.lua: the key mode is none, unique or same, not " .. mode)
  end
  local size = tonumber(args[2] or "0") or 0
  limit = tonumber(args[3] or "0") or 0
  prefix = string.format("%d-%s-%s-", os.time(), tag(), id or "t")
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.body = body(size)
  if mode == "same" then
    wrk.headers["Idempotency-Key"] = "bench-replay-key"
  end
end

function request()
  counter = counter + 1
  if limit > 0 and counter > limit then
    wrk.thread:stop()
  end
  local id = prefix .. counter
  wrk.headers["X-Request-Id"] = id
  if mode == "unique" then
    wrk.headers["Idempotency-Key"] = id
  end
  return wrk.format()
end
