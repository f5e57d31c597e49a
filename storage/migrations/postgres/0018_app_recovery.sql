-- As ../0018_app_recovery.sql: an app's recovery window.
ALTER TABLE apps ADD COLUMN recovery_window_ms BIGINT NOT NULL DEFAULT 120000;
