-- Push devices, their interests and user bindings, and the delivery / open
-- reports they send. Conventions as in 0001_init.sql.

-- devices are the app installs registered with a Push instance. user_id is
-- NULL until a user is bound; metadata is the SDK's JSON object of strings.
CREATE TABLE devices (
    id                TEXT    PRIMARY KEY,
    instance_id       TEXT    NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    platform          TEXT    NOT NULL CHECK (platform IN ('apns', 'fcm', 'web')),
    token             TEXT    NOT NULL,
    bundle_identifier TEXT    NOT NULL,
    metadata          TEXT    NOT NULL CHECK (json_type(metadata) = 'object'),
    user_id           TEXT,
    created_at_ms     INTEGER NOT NULL,
    updated_at_ms     INTEGER NOT NULL
) STRICT;

-- One device per gateway token: registering a known token finds this row
-- instead of creating a twin. Also serves the instance's ON DELETE CASCADE.
CREATE UNIQUE INDEX devices_token ON devices (instance_id, platform, token);

-- users -> devices: the 100-devices-per-user check, publishing to users and
-- deleting a user. Partial, because most devices never get a user.
CREATE INDEX devices_user ON devices (instance_id, user_id, id) WHERE user_id IS NOT NULL;

-- device_interests holds both directions of the subscription relation.
-- The primary key serves interest -> devices (publishing: one index range
-- per interest, in device id order, so pages are keyset-paged without
-- OFFSET); WITHOUT ROWID makes the table itself that index.
CREATE TABLE device_interests (
    instance_id TEXT NOT NULL,
    interest    TEXT NOT NULL,
    device_id   TEXT NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
    PRIMARY KEY (instance_id, interest, device_id)
) STRICT, WITHOUT ROWID;

-- device -> interests: listing and replacing a device's interests, and the
-- cascade when a device is deleted. Covering: in a WITHOUT ROWID table an
-- index also holds the primary key columns.
CREATE INDEX device_interests_device ON device_interests (device_id, interest);

-- report_events are the delivery and open reports devices send, one row per
-- (publish, device, event): a device reporting the same thing twice (SDKs
-- retry) counts once. The optional booleans are NULL when not sent.
CREATE TABLE report_events (
    id                      INTEGER PRIMARY KEY,
    instance_id             TEXT    NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    publish_id              TEXT    NOT NULL,
    device_id               TEXT    NOT NULL,
    event                   TEXT    NOT NULL CHECK (event IN ('delivery', 'open')),
    user_id                 TEXT    NOT NULL,
    timestamp_secs          INTEGER NOT NULL,
    app_in_background       INTEGER,
    has_displayable_content INTEGER,
    has_data                INTEGER,
    received_at_ms          INTEGER NOT NULL
) STRICT;

CREATE UNIQUE INDEX report_events_publish ON report_events (instance_id, publish_id, device_id, event);

-- Per-device counts (DeviceReportCounts).
CREATE INDEX report_events_device ON report_events (instance_id, device_id, event);

-- publish_report_counts keeps running totals per publish, updated in the
-- same transaction as each newly recorded event, so reading the counts of a
-- publish delivered to a million devices is one row, not a million.
CREATE TABLE publish_report_counts (
    instance_id TEXT    NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    publish_id  TEXT    NOT NULL,
    delivered   INTEGER NOT NULL,
    opened      INTEGER NOT NULL,
    PRIMARY KEY (instance_id, publish_id)
) STRICT, WITHOUT ROWID;
