-- POST without an Idempotency-Key: the gateway forwards it untouched (plain proxy).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"amount":1000,"currency":"eur","source":"tok_visa"}'
