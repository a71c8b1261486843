-- One page of live records for each state in $2, newest first. $1 now (see now.sql), $2 states,
-- $3 age in milliseconds (NULL: any), $4 scope (NULL: every scope), $5 $6 $7 the cursor, the last
-- record listed: created_at in milliseconds, scope, key (NULL: from the newest), $8 limit.
--
-- A page ends, exclusive, at one bound in the newest-first order (created_at, scope, key): the
-- cursor, or the age limit when that is lower (a 33-byte scope sorts above every scope, so the
-- bound (t, '\xff…', '') takes in every record acquired at or before t). For each state the
-- bound is where a backward walk of the index on (state, created_at) starts, and the walk stops
-- after $8 records and those acquired in the same millisecond as the last: the store sorts
-- records of one millisecond apart by scope and key. Sorting them here instead would let the
-- planner sort every record of the state (a generic plan made on a small table keeps doing so).
-- The index does not hold expiry or scope: the records it passes over that are expired or of
-- another scope are read and skipped.
WITH cursor AS (
    SELECT 'epoch'::timestamptz + $5::bigint * interval '1 millisecond' AS created_at,
        $6::bytea AS scope,
        $7::bytea AS key
),
aged AS (
    SELECT coalesce({now} - $3::bigint * interval '1 millisecond', 'infinity') AS created_at
),
bound AS (
    SELECT least(c.created_at, a.created_at) AS created_at,
        CASE WHEN c.created_at <= a.created_at THEN c.scope
            ELSE decode(repeat('ff', 33), 'hex')
        END AS scope,
        CASE WHEN c.created_at <= a.created_at THEN c.key ELSE '\x'::bytea END AS key
    FROM cursor AS c, aged AS a
)
SELECT listed.*
FROM bound AS b
CROSS JOIN unnest($2::text[]) AS s (state)
CROSS JOIN LATERAL (
    SELECT r.scope, r.key, r.fingerprint, r.state, r.token,
        (extract(epoch FROM r.lease_until) * 1000)::bigint AS lease_until,
        (extract(epoch FROM r.created_at) * 1000)::bigint AS created_at,
        (extract(epoch FROM r.completed_at) * 1000)::bigint AS completed_at,
        (extract(epoch FROM r.expires_at) * 1000)::bigint AS expires_at,
        r.response
    FROM "{schema}"."{table}" AS r
    WHERE r.state = s.state
        AND (r.created_at, r.scope, r.key) < (b.created_at, b.scope, b.key)
        AND {now} < r.expires_at
        AND ($4::bytea IS NULL OR r.scope = $4)
    -- The column, not the milliseconds selected under the same name.
    ORDER BY r.created_at DESC
    FETCH FIRST $8 ROWS WITH TIES
) AS listed
