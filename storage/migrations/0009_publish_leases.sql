-- A publish's targets are read by one dispatcher at a time, the one holding
-- its lease (lease_owner, until lease_until_ms): nodes sharing a database
-- never send the same page at once, and one that dies has its publishes
-- taken over when its leases run out (see ClaimPublishes). '' and 0: not
-- leased. Conventions as in 0001_init.sql.
ALTER TABLE publishes ADD COLUMN lease_owner TEXT NOT NULL DEFAULT '';
ALTER TABLE publishes ADD COLUMN lease_until_ms INTEGER NOT NULL DEFAULT 0;
