-- Channel history settings of an app (server/eventlog): the last
-- history_events events of each channel are kept, none older than
-- history_ttl_ms; 0 events is off, the default, so existing apps keep
-- nothing. 0014 is left to another change. Conventions as in 0001_init.sql.
ALTER TABLE apps ADD COLUMN history_events INTEGER NOT NULL DEFAULT 0;
ALTER TABLE apps ADD COLUMN history_ttl_ms INTEGER NOT NULL DEFAULT 0;
