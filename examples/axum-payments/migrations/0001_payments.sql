-- The service's own tables. The idem table lives next to them (`PostgresStore::migrate`).
CREATE TABLE accounts (
    id      text   PRIMARY KEY,
    balance bigint NOT NULL CHECK (balance >= 0)
);

-- Each charge names the idempotency key it was made under, so that the tests can check that
-- every charge has its completed key and every completed key its charge.
CREATE TABLE charges (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id text   NOT NULL REFERENCES accounts (id),
    amount     bigint NOT NULL CHECK (amount > 0),
    status     text   NOT NULL DEFAULT 'succeeded' CHECK (status IN ('succeeded', 'refunded')),
    key_scope  bytea  NOT NULL,
    key        text   NOT NULL
);
