-- ?3 token, ?4 processing, ?5 now. Why `append_part.sql` stored nothing: whether ?3 holds the
-- live processing record, and the next index of its parts.
SELECT
    EXISTS (
        SELECT 1 FROM idem_records
        WHERE scope = ?1 AND key = ?2 AND token = ?3 AND state = ?4 AND ?5 < expires_at
    ) AS holding,
    coalesce(
        (SELECT idx + 1 FROM idem_parts
         WHERE scope = ?1 AND key = ?2 AND token = ?3
         ORDER BY idx DESC
         LIMIT 1),
        0) AS next
