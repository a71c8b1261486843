coalesce(
    'epoch'::timestamptz + $1::bigint * interval '1 millisecond',
    date_trunc('milliseconds', statement_timestamp())
)
