-- Conventions for every table: booleans are INTEGER 0/1, durations integer
-- milliseconds (*_ms), timestamps unix milliseconds (*_at_ms), lists JSON
-- array text. Tables are STRICT so a wrongly typed value fails loudly.

-- apps are Channels applications.
CREATE TABLE apps (
    id                           TEXT    PRIMARY KEY,
    key                          TEXT    NOT NULL UNIQUE,
    secret                       TEXT    NOT NULL,
    enabled                      INTEGER NOT NULL,
    client_events                INTEGER NOT NULL,
    subscription_count           INTEGER NOT NULL,
    user_auth_timeout_ms         INTEGER NOT NULL,
    max_connections              INTEGER NOT NULL,
    max_presence_members         INTEGER NOT NULL,
    max_presence_user_info_bytes INTEGER NOT NULL,
    created_at_ms                INTEGER NOT NULL,
    updated_at_ms                INTEGER NOT NULL
) STRICT;

-- app_webhooks are the webhook endpoints of an app, in insertion (id) order.
CREATE TABLE app_webhooks (
    id             INTEGER PRIMARY KEY,
    app_id         TEXT    NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    url            TEXT    NOT NULL,
    event_types    TEXT    NOT NULL CHECK (json_type(event_types) = 'array'),
    channel_prefix TEXT    NOT NULL,
    batch          INTEGER NOT NULL
) STRICT;

-- Serves the per-app lookup and the ON DELETE CASCADE, which would otherwise
-- scan the whole table.
CREATE INDEX app_webhooks_app_id ON app_webhooks (app_id, id);

-- instances are Push (Beams) instances with their gateway credentials.
CREATE TABLE instances (
    id                       TEXT    PRIMARY KEY,
    secret_key               TEXT    NOT NULL,
    jwt_issuer               TEXT    NOT NULL,
    enabled                  INTEGER NOT NULL,
    apns_key_pem             TEXT    NOT NULL,
    apns_key_id              TEXT    NOT NULL,
    apns_team_id             TEXT    NOT NULL,
    apns_topic               TEXT    NOT NULL,
    apns_url                 TEXT    NOT NULL,
    apns_ca_pem              TEXT    NOT NULL,
    fcm_service_account_json TEXT    NOT NULL,
    fcm_url                  TEXT    NOT NULL,
    vapid_public_key         TEXT    NOT NULL,
    vapid_private_key        TEXT    NOT NULL,
    vapid_subject            TEXT    NOT NULL,
    publish_quota            INTEGER NOT NULL,
    created_at_ms            INTEGER NOT NULL,
    updated_at_ms            INTEGER NOT NULL
) STRICT;

-- config_version counts changes to apps, app_webhooks and instances. The
-- triggers below bump it in the same transaction as the change, whichever
-- process makes it, so a running server can poll one row to learn that its
-- in-memory configuration is stale (see DB.DataVersion).
CREATE TABLE config_version (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
) STRICT;

INSERT INTO config_version (id, version) VALUES (1, 0);

CREATE TRIGGER apps_insert_version AFTER INSERT ON apps
BEGIN UPDATE config_version SET version = version + 1; END;
CREATE TRIGGER apps_update_version AFTER UPDATE ON apps
BEGIN UPDATE config_version SET version = version + 1; END;
CREATE TRIGGER apps_delete_version AFTER DELETE ON apps
BEGIN UPDATE config_version SET version = version + 1; END;

CREATE TRIGGER app_webhooks_insert_version AFTER INSERT ON app_webhooks
BEGIN UPDATE config_version SET version = version + 1; END;
CREATE TRIGGER app_webhooks_update_version AFTER UPDATE ON app_webhooks
BEGIN UPDATE config_version SET version = version + 1; END;
CREATE TRIGGER app_webhooks_delete_version AFTER DELETE ON app_webhooks
BEGIN UPDATE config_version SET version = version + 1; END;

CREATE TRIGGER instances_insert_version AFTER INSERT ON instances
BEGIN UPDATE config_version SET version = version + 1; END;
CREATE TRIGGER instances_update_version AFTER UPDATE ON instances
BEGIN UPDATE config_version SET version = version + 1; END;
CREATE TRIGGER instances_delete_version AFTER DELETE ON instances
BEGIN UPDATE config_version SET version = version + 1; END;
