-- The per-app cap on queued webhook requests (HERALD_WEBHOOK_MAX_QUEUED):
-- EnqueueWebhooks counts an app's requests and finds its oldest along this
-- index (SQLite keeps the rowid, which is the id, in every index entry, so the
-- entries of one app are in the order the requests were written).
CREATE INDEX webhook_outbox_app ON webhook_outbox (app_id);
