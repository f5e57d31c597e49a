-- Push publishes, their pending deliveries and their webhook outbox.
-- Conventions as in 0001_init.sql.

-- publishes are accepted Publish API requests. payload is the JSON object
-- {"apns":…, "fcm":…, "web":…} as received; targets the interests or users.
-- Targets are resolved in pages after the request is answered: cursor is the
-- last device id (interests) or the number of users (users) already turned
-- into deliveries, and resolved is 1 once all are.
CREATE TABLE publishes (
    id             TEXT    PRIMARY KEY,
    instance_id    TEXT    NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    target_kind    TEXT    NOT NULL CHECK (target_kind IN ('interests', 'users')),
    targets        TEXT    NOT NULL CHECK (json_type(targets) = 'array'),
    payload        TEXT    NOT NULL CHECK (json_type(payload) = 'object'),
    webhook_url    TEXT    NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN ('accepted', 'delivering', 'done')),
    cursor         TEXT    NOT NULL,
    resolved       INTEGER NOT NULL,
    targeted       INTEGER NOT NULL,
    sent           INTEGER NOT NULL,
    failed         INTEGER NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    finished_at_ms INTEGER
) STRICT;

-- The daily quota count and the instance's ON DELETE CASCADE.
CREATE INDEX publishes_instance ON publishes (instance_id, created_at_ms);

-- The resolver's work list.
CREATE INDEX publishes_unresolved ON publishes (created_at_ms) WHERE resolved = 0;

-- deliveries are the notifications not sent yet, one per (publish, device):
-- written when targets are resolved, deleted once the gateway accepted or
-- refused them (the publish's counters say which). claimed is 1 while a
-- worker holds the row; a starting node releases every claim, so after a
-- crash the rows are sent again (at least once). The device's gateway token
-- is copied so that sending needs no join, and so is the target user of a
-- publish to users (data.pusher.userId; '' for interests). No foreign keys:
-- a device deleted meanwhile is still attempted, and the rows go with their
-- publish through DeletePublishDeliveries only.
CREATE TABLE deliveries (
    id                 INTEGER PRIMARY KEY,
    publish_id         TEXT    NOT NULL,
    instance_id        TEXT    NOT NULL,
    device_id          TEXT    NOT NULL,
    platform           TEXT    NOT NULL CHECK (platform IN ('apns', 'fcm', 'web')),
    token              TEXT    NOT NULL,
    bundle_identifier  TEXT    NOT NULL,
    user_id            TEXT    NOT NULL DEFAULT '',
    attempts           INTEGER NOT NULL,
    claimed            INTEGER NOT NULL,
    next_attempt_at_ms INTEGER NOT NULL
) STRICT;

-- One notification per device and publish, whichever interests matched.
CREATE UNIQUE INDEX deliveries_publish_device ON deliveries (publish_id, device_id);

-- The claim query: a platform's unclaimed rows in due order (each gateway is
-- fed separately, so a slow one does not hold up the others).
CREATE INDEX deliveries_due ON deliveries (platform, next_attempt_at_ms, id) WHERE claimed = 0;

-- publish_webhook_outbox holds publish webhooks (publish_started,
-- publish_finished) until their URL accepts them, written in the same
-- transaction as the state change they report.
CREATE TABLE publish_webhook_outbox (
    id                 INTEGER PRIMARY KEY,
    instance_id        TEXT    NOT NULL,
    url                TEXT    NOT NULL,
    body               BLOB    NOT NULL,
    attempts           INTEGER NOT NULL,
    next_attempt_at_ms INTEGER NOT NULL,
    created_at_ms      INTEGER NOT NULL
) STRICT;

CREATE INDEX publish_webhook_outbox_due ON publish_webhook_outbox (next_attempt_at_ms);
