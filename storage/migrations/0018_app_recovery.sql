-- How long after losing its connection a client of an app may come back
-- and get what it missed (recovery, over the app's channel history):
-- 120000 (2 minutes) by default, -1 off. Conventions as in 0001_init.sql.
ALTER TABLE apps ADD COLUMN recovery_window_ms INTEGER NOT NULL DEFAULT 120000;
