-- POST with one Idempotency-Key on every request: after the first, every request is a replay.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Idempotency-Key"] = "bench-replay-key"
wrk.body = '{"amount":1000,"currency":"eur","source":"tok_visa"}'
