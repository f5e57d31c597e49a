-- As ../0012_publish_lease_epochs.sql: the times a publish's lease changed
-- hands, so that a page read in an earlier tenure is not recorded.
ALTER TABLE publishes ADD COLUMN lease_epoch BIGINT NOT NULL DEFAULT 0;
