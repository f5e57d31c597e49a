-- As ../0017_publish_webhook_guard.sql: webhooks of a publish made by a
-- trigger's push_if_offline go through the Web Push endpoints' address
-- guard.
ALTER TABLE publishes ADD COLUMN webhook_guarded INTEGER NOT NULL DEFAULT 0;
ALTER TABLE publish_webhook_outbox ADD COLUMN guarded INTEGER NOT NULL DEFAULT 0;
