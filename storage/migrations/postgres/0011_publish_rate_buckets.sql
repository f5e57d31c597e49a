-- As ../0011_publish_rate_buckets.sql: the Publish API's rate limit per
-- instance, one token bucket a row, shared by every node.
--
-- UNLOGGED: the row of a busy instance is rewritten on every request, and
-- nothing in it is worth the WAL. A crash or a failover leaves the table
-- empty, that is every bucket full, which is what the outage would have left
-- anyway (a bucket is full again after a second). The fillfactor leaves room
-- in each page for the next versions of its rows (HOT updates: the primary
-- key never changes).
CREATE UNLOGGED TABLE publish_rate_buckets (
    instance_id TEXT COLLATE "C" PRIMARY KEY REFERENCES instances (id) ON DELETE CASCADE,
    tokens      DOUBLE PRECISION NOT NULL,
    updated_ms  BIGINT NOT NULL
) WITH (fillfactor = 50);
