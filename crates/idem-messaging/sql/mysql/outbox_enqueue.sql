-- ? id, ? destination, ? ordering key, ? headers (a JSON array of [name, value] pairs),
-- ? payload. Inserts the message in the caller's transaction; relays on MySQL find it when they
-- poll.
INSERT INTO {qualified} (
    id, destination, ordering_key, headers, payload, state, available_at, enqueued_at
)
VALUES (?, ?, ?, ?, ?, 'pending', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))
