-- The number of messages waiting to be published (claimed or not).
SELECT count(*) FROM {qualified} WHERE state = 'pending'
