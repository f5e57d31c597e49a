-- A claimed delivery is claimed until claimed_until_ms: a claim of a node
-- that died runs out and the delivery is claimed again (by any node sharing
-- the database), rather than every claim being taken back when a node
-- starts, which on a shared database would take back the claims of the
-- others' deliveries in flight. Rows claimed by earlier versions have 0:
-- run out. Conventions as in 0001_init.sql.
ALTER TABLE deliveries ADD COLUMN claimed_until_ms INTEGER NOT NULL DEFAULT 0;

-- Finding the claims that ran out (few rows: those in flight).
CREATE INDEX deliveries_claimed ON deliveries (claimed_until_ms) WHERE claimed = 1;
