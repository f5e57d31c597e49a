-- As ../0015_app_history.sql: an app's channel history settings.
ALTER TABLE apps ADD COLUMN history_events BIGINT NOT NULL DEFAULT 0;
ALTER TABLE apps ADD COLUMN history_ttl_ms BIGINT NOT NULL DEFAULT 0;
