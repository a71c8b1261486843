-- $1 now, $2 scope, $3 key, $4 token, $5 the first index, $6 the most bytes. The unexpired parts
-- of the execution, from index $5 on, in order and without a gap (an expired part is one), as
-- many as fit in $6 bytes and at least one: at most 256 parts, a bounded range of the primary
-- key's index, whatever the record's state.
SELECT p.idx, p.part
FROM (
    SELECT idx, part,
        row_number() OVER w AS n,
        sum(octet_length(part)) OVER w AS bytes
    FROM "{schema}"."{table}_parts"
    WHERE scope = $2 AND key = $3 AND token = $4
        AND idx >= $5::bigint AND idx < $5::bigint + 256
        AND {now} < expires_at
    WINDOW w AS (ORDER BY idx)
) AS p
-- Contiguous: the n-th part read is part $5 + n - 1; after a gap, none is.
WHERE p.idx = $5::bigint + p.n - 1 AND (p.n = 1 OR p.bytes <= $6::bigint)
ORDER BY p.idx
