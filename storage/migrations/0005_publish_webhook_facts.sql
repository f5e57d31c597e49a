-- publish_webhook_outbox keeps the facts of each publish webhook in columns
-- of its own instead of an encoded body: storage records what happened, and
-- push encodes the request when it sends it. Rows queued by earlier versions
-- are converted from their JSON bodies (every field of which is here, the
-- instance id in instance_id), so they are sent with the same content.
-- Conventions as in 0001_init.sql.
CREATE TABLE publish_webhook_outbox_facts (
    id                 INTEGER PRIMARY KEY,
    instance_id        TEXT    NOT NULL,
    url                TEXT    NOT NULL,
    publish_id         TEXT    NOT NULL,
    event              TEXT    NOT NULL CHECK (event IN ('publish_started', 'publish_finished')),
    state              TEXT    NOT NULL CHECK (state IN ('accepted', 'delivering', 'done')),
    targeted           INTEGER NOT NULL,
    sent               INTEGER NOT NULL,
    failed             INTEGER NOT NULL,
    at_ms              INTEGER NOT NULL, -- when the event happened
    attempts           INTEGER NOT NULL,
    next_attempt_at_ms INTEGER NOT NULL,
    created_at_ms      INTEGER NOT NULL
) STRICT;

-- A body that is not JSON was never written (push encoded every one), and
-- could not be converted: such a row is dropped rather than failing the
-- migration.
INSERT INTO publish_webhook_outbox_facts (id, instance_id, url, publish_id, event, state, targeted, sent, failed,
    at_ms, attempts, next_attempt_at_ms, created_at_ms)
SELECT id, instance_id, url, json_extract(b, '$.publishId'), json_extract(b, '$.event'), json_extract(b, '$.state'),
    json_extract(b, '$.targeted'), json_extract(b, '$.sent'), json_extract(b, '$.failed'), json_extract(b, '$.timeMs'),
    attempts, next_attempt_at_ms, created_at_ms
FROM (SELECT *, CAST(body AS TEXT) AS b FROM publish_webhook_outbox)
WHERE json_valid(b);

DROP TABLE publish_webhook_outbox;

ALTER TABLE publish_webhook_outbox_facts RENAME TO publish_webhook_outbox;

CREATE INDEX publish_webhook_outbox_due ON publish_webhook_outbox (next_attempt_at_ms);
