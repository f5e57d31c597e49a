-- publish_rate_buckets hold the Publish API's rate limit per instance where
-- several nodes share the database (see DB.TakePublishToken): a token bucket
-- holding tokens at updated_ms (the clock of the node that last took one).
-- An instance without a row has a full bucket; a single node on SQLite keeps
-- its buckets in memory and never writes here. The rows are not copied by
-- herald copy (see copyTables). Conventions as in 0001_init.sql.
CREATE TABLE publish_rate_buckets (
    instance_id TEXT    PRIMARY KEY REFERENCES instances (id) ON DELETE CASCADE,
    tokens      REAL    NOT NULL,
    updated_ms  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
