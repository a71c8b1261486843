-- ?3 token, ?4 processing, ?5 now, ?6 the part's index, ?7 the part. Stores the part, with the
-- record's expiry, if ?3 holds the live processing record and ?6 is the next index of its parts.
-- An execution's parts are contiguous from 0 (appended at the end, deleted all together or once
-- expired), so the next index is one past the last, found in one step down the primary key
-- rather than by counting them.
INSERT INTO idem_parts (scope, key, token, idx, expires_at, part)
SELECT scope, key, token, ?6, expires_at, ?7
FROM idem_records
WHERE scope = ?1 AND key = ?2 AND token = ?3 AND state = ?4 AND ?5 < expires_at
    AND ?6 = coalesce(
        (SELECT idx + 1 FROM idem_parts
         WHERE scope = ?1 AND key = ?2 AND token = ?3
         ORDER BY idx DESC
         LIMIT 1),
        0)
