-- Release, by the holder of the token only. $1 now, $2 scope, $3 key, $4 token. One row when
-- done, none when the token does not hold a live processing record.
WITH clock AS (
    SELECT {now} AS now
),
released AS (
    DELETE FROM "{schema}"."{table}" AS r
    USING clock AS c
    WHERE r.scope = $2 AND r.key = $3
        AND r.token = $4 AND r.state = 'processing' AND c.now < r.expires_at
    RETURNING r.scope, r.key, r.watched
)
-- Only a record that somebody found in flight (see acquire.sql) is worth a NOTIFY.
SELECT CASE WHEN watched
    THEN pg_notify('{channel}', encode(sha256(scope || key), 'hex'))
END
FROM released
