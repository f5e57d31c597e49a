-- lease_epoch counts the times a publish's lease changed hands: ClaimPublishes
-- adds one whenever it gives the lease to an owner other than lease_owner
-- (the first claim included), and a page is recorded only under the owner
-- and the epoch it was read with (see CompletePages). A node that lost a
-- publish and took it back has a new epoch, so pages it read before another
-- node held it are refused rather than moving the cursor. Conventions as in
-- 0001_init.sql.
ALTER TABLE publishes ADD COLUMN lease_epoch INTEGER NOT NULL DEFAULT 0;
