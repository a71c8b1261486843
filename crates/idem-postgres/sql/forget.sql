-- Forget, whatever the state. $1 now, $2 scope, $3 key. Returns whether the record was live, or
-- no row when there was none.
WITH clock AS (
    SELECT {now} AS now
),
forgotten AS (
    DELETE FROM "{schema}"."{table}"
    WHERE scope = $2 AND key = $3
    RETURNING scope, key, expires_at, watched
)
SELECT c.now < f.expires_at AS live,
    -- Only a record that somebody found in flight (see acquire.sql) is worth a NOTIFY.
    CASE WHEN f.watched
        THEN pg_notify('{channel}', encode(sha256(f.scope || f.key), 'hex'))
    END
FROM forgotten AS f, clock AS c
