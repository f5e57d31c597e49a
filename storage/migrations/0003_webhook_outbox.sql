-- webhook_outbox holds Channels webhook requests until their endpoint accepts
-- them: written before the first attempt, deleted on a 2xx answer or once
-- they are too old to matter, so a crash or restart loses none.
CREATE TABLE webhook_outbox (
    id                 INTEGER PRIMARY KEY,
    app_id             TEXT    NOT NULL,
    url                TEXT    NOT NULL,
    body               BLOB    NOT NULL, -- the exact bytes signed and sent
    attempts           INTEGER NOT NULL,
    next_attempt_at_ms INTEGER NOT NULL,
    created_at_ms      INTEGER NOT NULL
) STRICT;

CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at_ms);

-- Per-URL order: DueWebhooks looks for older requests to the same URL.
CREATE INDEX webhook_outbox_url ON webhook_outbox (url, id);
