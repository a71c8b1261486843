-- ?1 now, ?2 processing. The processing records are counted from their range of
-- idem_records_state_created (`+expires_at`: not from the `expires_at` index); the completed ones
-- are the other live records, counted from the `expires_at` index alone, without reading a
-- record. One statement, so one snapshot: the two counts agree.
SELECT p.count AS processing,
    (SELECT count(*) FROM idem_records WHERE ?1 < expires_at) - p.count AS completed,
    p.oldest AS oldest_processing
FROM (
    SELECT count(*) AS count, min(created_at) AS oldest
    FROM idem_records
    WHERE state = ?2 AND ?1 < +expires_at
) AS p
