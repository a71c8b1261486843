-- The number of messages waiting to be published (claimed or not).
SELECT count(*) FROM "{schema}"."{table}" WHERE state = 'pending'
