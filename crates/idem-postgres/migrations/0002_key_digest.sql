-- Records are addressed by a digest of the idempotency key, SHA-256 of its UTF-8 bytes, rather
-- than the key itself: keys can carry customer data (an order number, an e-mail), and a dump of
-- the table must not show them. PostgreSQL computes SHA-256 itself, so records already stored
-- are converted in place, in this migration's transaction; the primary key is rebuilt with them.
ALTER TABLE "{schema}"."{table}"
    ALTER COLUMN key TYPE bytea USING sha256(convert_to(key, 'UTF8'));
