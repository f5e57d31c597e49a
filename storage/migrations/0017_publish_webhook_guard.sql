-- A publish whose webhook URL comes from an app's server rather than from
-- the Push instance's (a trigger's push_if_offline) has its webhooks sent
-- through the Web Push endpoints' address guard, never to a private
-- address: webhook_guarded on the publish, guarded on each webhook queued
-- for it. 0 for every existing row (the Publish API's own). Conventions as
-- in 0001_init.sql.
ALTER TABLE publishes ADD COLUMN webhook_guarded INTEGER NOT NULL DEFAULT 0;
ALTER TABLE publish_webhook_outbox ADD COLUMN guarded INTEGER NOT NULL DEFAULT 0;
