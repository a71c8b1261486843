-- The records in the order they arrive. InnoDB keeps a table's rows in its primary key's index:
-- keyed by (scope, key digest), a hash, every new record went to a random page of the whole
-- table, so that as the table grew past the buffer pool each acquisition read a page from disk
-- and dirtied one that was not dirty yet. Keyed by an id that grows, new records fill the last
-- pages; the random insert goes to `address`, an index of the addresses alone, a fraction of the
-- table's size. Statements still name records by address, through `address`.
--
-- `{table}_state_created` gains the address: InnoDB completed its entries with the primary key,
-- which was the address; listing walks them in (state, created_at, scope, key digest) order.
--
-- A rebuild of the table, once, during which neither server lets it be written (a new
-- AUTO_INCREMENT column takes no concurrent writes): on a large table, run `idem migrate` when
-- the gateways can wait that long.
ALTER TABLE `{table}`
    DROP PRIMARY KEY,
    ADD COLUMN id BIGINT NOT NULL AUTO_INCREMENT FIRST,
    ADD PRIMARY KEY (id),
    ADD UNIQUE KEY address (scope, key_digest),
    DROP KEY `{table}_state_created`,
    ADD KEY `{table}_state_created` (state, created_at, scope, key_digest);
