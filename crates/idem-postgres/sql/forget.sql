-- Forget, whatever the state, and every streamed part of the address, whatever its token. $1 now,
-- $2 scope, $3 key. Returns whether the record was live, or no row when there was none.
WITH clock AS (
    SELECT {now} AS now
),
forgotten AS (
    DELETE FROM "{schema}"."{table}"
    WHERE scope = $2 AND key = $3
    RETURNING scope, key, expires_at, watched
),
-- Runs whether or not a record was found (a data-modifying `WITH` always runs to completion).
parts AS (
    DELETE FROM "{schema}"."{table}_parts"
    WHERE scope = $2 AND key = $3
)
SELECT c.now < f.expires_at AS live,
    -- Only a record that somebody found in flight (see acquire.sql) is worth a NOTIFY.
    CASE WHEN f.watched
        THEN pg_notify('{channel}', encode(sha256(f.scope || f.key), 'hex'))
    END
FROM forgotten AS f, clock AS c
