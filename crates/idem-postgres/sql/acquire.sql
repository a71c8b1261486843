-- Acquire, in one statement. $1 now (see now.sql), $2 scope, $3 key, $4 fingerprint,
-- $5 lease and $6 ttl in milliseconds.
--
-- `plan` decides on the record as the statement's snapshot shows it, exactly as
-- `idem_core::transition::plan_acquire` does. A `create` or a `take_over` writes the record, and
-- the first `in_flight` marks it watched; each write re-checks its decision on the latest version
-- of the row, which may have changed since the snapshot. A write that found nothing to write lost
-- a race with a concurrent writer (`raced`): the caller runs the statement again, with a new
-- snapshot. Replays, mismatches and later in-flight answers only read, so they never lock the row.
WITH clock AS (
    SELECT {now} AS now
),
found AS (
    SELECT fingerprint, state, token, lease_until, expires_at, response, watched
    FROM "{schema}"."{table}"
    WHERE scope = $2 AND key = $3
),
plan AS (
    SELECT c.now, f.token, f.lease_until, f.response, f.watched,
        CASE
            WHEN f.expires_at IS NULL OR f.expires_at <= c.now THEN 'create'
            WHEN f.fingerprint <> $4 THEN 'mismatch'
            WHEN f.state = 'completed' THEN 'replay'
            WHEN c.now < f.lease_until THEN 'in_flight'
            ELSE 'take_over'
        END AS plan
    FROM clock AS c
    LEFT JOIN found AS f ON true
),
created AS (
    INSERT INTO "{schema}"."{table}" AS r
        (scope, key, fingerprint, state, token, lease_until, created_at, expires_at)
    SELECT $2, $3, $4, 'processing', nextval('"{schema}"."{table}_tokens"'),
        p.now + $5::bigint * interval '1 millisecond',
        p.now,
        p.now + greatest($5::bigint, $6::bigint) * interval '1 millisecond'
    FROM plan AS p
    WHERE p.plan = 'create'
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
    RETURNING r.token, r.lease_until
),
taken AS (
    UPDATE "{schema}"."{table}" AS r
    SET token = nextval('"{schema}"."{table}_tokens"'),
        lease_until = p.now + $5::bigint * interval '1 millisecond',
        expires_at = greatest(r.expires_at, p.now + $5::bigint * interval '1 millisecond')
    FROM plan AS p
    WHERE p.plan = 'take_over'
        AND r.scope = $2 AND r.key = $3
        -- The same acquisition, still processing, its lease still over, the record still live.
        AND r.token = p.token AND r.state = 'processing'
        AND r.lease_until <= p.now AND p.now < r.expires_at
    RETURNING r.token, r.lease_until
),
watching AS (
    UPDATE "{schema}"."{table}" AS r
    SET watched = true
    FROM plan AS p
    WHERE p.plan = 'in_flight' AND NOT p.watched
        AND r.scope = $2 AND r.key = $3
        -- The same acquisition, still processing (a renewal only moves its lease further).
        AND r.token = p.token AND r.state = 'processing'
    RETURNING r.token
),
written AS (
    SELECT token, lease_until FROM created
    UNION ALL
    SELECT token, lease_until FROM taken
)
SELECT p.plan,
    w.token,
    (extract(epoch FROM w.lease_until) * 1000)::bigint AS lease_until,
    (extract(epoch FROM p.lease_until - p.now) * 1000)::bigint AS retry_after,
    CASE WHEN p.plan = 'replay' THEN p.response END AS response,
    CASE p.plan
        WHEN 'create' THEN w.token IS NULL
        WHEN 'take_over' THEN w.token IS NULL
        WHEN 'in_flight' THEN NOT p.watched AND NOT EXISTS (SELECT FROM watching)
        ELSE false
    END AS raced
FROM plan AS p
LEFT JOIN written AS w ON true
