-- One page of one state's live records, newest first. ?1 now, ?2 state, ?3 scope (NULL: every
-- scope), ?4 ?5 ?6 where the page ends, exclusive: (created_at, scope, key) in newest-first
-- order, ?7 limit. The bound is an index range on idem_records_state_created, which yields the
-- records newest first (ties within a millisecond are sorted apart); `+expires_at` keeps the
-- planner off the `expires_at` index, which would read every live record and sort them.
SELECT scope, key, fingerprint, state, token, lease_until, created_at, completed_at, expires_at,
    response
FROM idem_records
WHERE state = ?2
    AND (created_at, scope, key) < (?4, ?5, ?6)
    AND ?1 < +expires_at
    AND (?3 IS NULL OR scope = ?3)
ORDER BY created_at DESC, scope DESC, key DESC
LIMIT ?7
