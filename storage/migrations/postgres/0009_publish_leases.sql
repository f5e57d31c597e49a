-- As ../0009_publish_leases.sql: a publish's targets are read by the
-- dispatcher holding its lease.
ALTER TABLE publishes ADD COLUMN lease_owner TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE publishes ADD COLUMN lease_until_ms BIGINT NOT NULL DEFAULT 0;
