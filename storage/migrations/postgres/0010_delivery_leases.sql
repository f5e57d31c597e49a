-- As ../0010_delivery_leases.sql: a delivery's claim runs out.
ALTER TABLE deliveries ADD COLUMN claimed_until_ms BIGINT NOT NULL DEFAULT 0;

CREATE INDEX deliveries_claimed ON deliveries (claimed_until_ms) WHERE claimed = 1;
