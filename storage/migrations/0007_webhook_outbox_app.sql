-- order_key: the requests of one URL with the same key are sent one at a time,
-- in the order they were written; those with different keys may be sent at
-- the same time (see ClaimWebhooks). The dispatcher keys a request by its
-- channel, or '' for a batch of several. Requests queued before this
-- migration share the key '': one at a time, in order, as before.
ALTER TABLE webhook_outbox ADD COLUMN order_key TEXT NOT NULL DEFAULT '';

-- The per-app cap on queued webhook requests (HERALD_WEBHOOK_MAX_QUEUED):
-- EnqueueWebhooks counts an app's requests and finds its oldest along this
-- index (SQLite keeps the rowid, which is the id, in every index entry, so the
-- entries of one app are in the order the requests were written).
CREATE INDEX webhook_outbox_app ON webhook_outbox (app_id);
