-- `POST /accounts/{id}/payments` runs behind an idem gateway (or tower layer) that sends each
-- request's fencing token: the largest token seen for each idempotency key is kept here, and a
-- payment that carries a smaller one comes from a request whose lease was taken over: refused.
CREATE TABLE payment_fences (
    key_scope bytea  NOT NULL,
    key       text   NOT NULL,
    token     bigint NOT NULL,
    PRIMARY KEY (key_scope, key)
);

-- A payment finds the charge an earlier holder of its key made, if any.
CREATE INDEX charges_key ON charges (key_scope, key);
