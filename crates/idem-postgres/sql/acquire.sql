-- Acquire, in one statement, for a batch. $1 now (see now.sql); one element per acquisition in
-- $2 scopes, $3 keys, $4 fingerprints, $5 leases and $6 ttls in milliseconds. One row per
-- acquisition, `n` its position in the arrays (from 1). Of several acquisitions of one address,
-- only the `first` may write: the others run again if they meant to.
WITH batch AS (
    SELECT *, row_number() OVER (PARTITION BY scope, key ORDER BY n) = 1 AS first
    FROM unnest($2::bytea[], $3::bytea[], $4::bytea[], $5::bigint[], $6::bigint[])
        WITH ORDINALITY AS b (scope, key, fingerprint, lease, ttl, n)
),
found AS (
    SELECT b.*, f.fingerprint AS found, f.state, f.token, f.lease_until, f.expires_at,
        f.response, f.watched
    FROM batch AS b
    LEFT JOIN "{schema}"."{table}" AS f ON f.scope = b.scope AND f.key = b.key
),
clock AS (
    SELECT {now} AS now
),
-- `plan` decides on each record as the statement's snapshot shows it, exactly as
-- `idem_core::transition::plan_acquire` does. A `create` or a `take_over` writes the record, and
-- the first `in_flight` marks it watched; each write re-checks its decision on the latest version
-- of the row, which may have changed since the snapshot. A write that found nothing to write lost
-- a race with a concurrent writer (`raced`): the caller runs that acquisition again, with a new
-- snapshot. Replays, mismatches and later in-flight answers only read, so they never lock the row.
plan AS (
    SELECT f.n, f.first, f.scope, f.key, f.fingerprint, f.lease, f.ttl, c.now,
        f.token, f.lease_until, f.response, f.watched,
        CASE
            WHEN f.expires_at IS NULL OR f.expires_at <= c.now THEN 'create'
            WHEN f.found <> f.fingerprint THEN 'mismatch'
            WHEN f.state = 'completed' THEN 'replay'
            WHEN c.now < f.lease_until THEN 'in_flight'
            ELSE 'take_over'
        END AS plan
    FROM found AS f
    CROSS JOIN clock AS c
),
-- New records are inserted in the arrays' order, which the store sorts by address, so that two
-- batches creating the same keys wait for each other instead of deadlocking.
created AS (
    INSERT INTO "{schema}"."{table}" AS r
        (scope, key, fingerprint, state, token, lease_until, created_at, expires_at)
    SELECT p.scope, p.key, p.fingerprint, 'processing', nextval('"{schema}"."{table}_tokens"'),
        p.now + p.lease * interval '1 millisecond',
        p.now,
        p.now + greatest(p.lease, p.ttl) * interval '1 millisecond'
    FROM plan AS p
    WHERE p.plan = 'create' AND p.first
    ORDER BY p.n
    ON CONFLICT (scope, key) DO UPDATE SET
        fingerprint = excluded.fingerprint,
        state = excluded.state,
        -- Drawn under the row lock, so larger than the token of the record it replaces.
        token = nextval('"{schema}"."{table}_tokens"'),
        lease_until = excluded.lease_until,
        created_at = excluded.created_at,
        completed_at = NULL,
        expires_at = excluded.expires_at,
        response = NULL,
        watched = false
    -- Replaces a record only if it has expired on its latest version too.
    WHERE r.expires_at <= excluded.created_at
    RETURNING r.scope, r.key, r.token, r.lease_until
),
taken AS (
    UPDATE "{schema}"."{table}" AS r
    SET token = nextval('"{schema}"."{table}_tokens"'),
        lease_until = p.now + p.lease * interval '1 millisecond',
        expires_at = greatest(r.expires_at, p.now + p.lease * interval '1 millisecond')
    FROM plan AS p
    WHERE p.plan = 'take_over' AND p.first
        AND r.scope = p.scope AND r.key = p.key
        -- The same acquisition, still processing, its lease still over, the record still live.
        -- `IS TRUE` keeps the state out of the index conditions: the record is found by primary
        -- key, never by walking the listing's index on (state, created_at).
        AND r.token = p.token AND (r.state = 'processing') IS TRUE
        AND r.lease_until <= p.now AND p.now < r.expires_at
    RETURNING r.scope, r.key, r.token, r.lease_until
),
watching AS (
    UPDATE "{schema}"."{table}" AS r
    SET watched = true
    FROM plan AS p
    WHERE p.plan = 'in_flight' AND NOT p.watched
        AND r.scope = p.scope AND r.key = p.key
        -- The same acquisition, still processing (a renewal only moves its lease further; `IS
        -- TRUE`: see `taken`).
        AND r.token = p.token AND (r.state = 'processing') IS TRUE
    RETURNING r.scope, r.key
),
written AS (
    SELECT scope, key, token, lease_until FROM created
    UNION ALL
    SELECT scope, key, token, lease_until FROM taken
)
SELECT p.n,
    p.plan,
    w.token,
    (extract(epoch FROM w.lease_until) * 1000)::bigint AS lease_until,
    (extract(epoch FROM p.lease_until - p.now) * 1000)::bigint AS retry_after,
    CASE WHEN p.plan = 'replay' THEN p.response END AS response,
    CASE p.plan
        WHEN 'create' THEN NOT p.first OR w.token IS NULL
        WHEN 'take_over' THEN NOT p.first OR w.token IS NULL
        WHEN 'in_flight' THEN NOT p.watched AND NOT EXISTS (
            SELECT FROM watching AS s WHERE s.scope = p.scope AND s.key = p.key
        )
        ELSE false
    END AS raced
FROM plan AS p
LEFT JOIN written AS w ON w.scope = p.scope AND w.key = p.key
