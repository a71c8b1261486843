AND (o.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1
        FROM {qualified} AS earlier
        WHERE earlier.state = 'pending'
          AND earlier.ordering_key = o.ordering_key
          AND earlier.seq < o.seq
    ))
