#!lua flags=no-writes,allow-cross-slot-keys
-- The operators' scripts (list, census) write nothing, and read the record keys of one SCAN
-- step: keys of many slots, passed in ARGV rather than declared, read on the node that holds
-- them (Redis Cluster allows that of a script with these flags).
