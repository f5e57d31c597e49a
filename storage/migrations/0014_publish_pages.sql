-- publish_pages are the pages of a publish's targets, the unit of work that
-- nodes sharing the database claim (see ClaimPage): a range of one target
-- stream, the targets after after_cursor up to end_cursor (device ids of one
-- platform for a publish to interests, user indexes for one to users).
-- publishes.cursor is, per stream, how far pages were claimed; a page is
-- open (done = 0) while its owner sends it, under a lease (lease_until_ms)
-- its owner renews, and another node takes it over, epoch one more, once
-- the lease ran out. A page is recorded (done = 1, with its counts) only
-- by the owner and epoch that hold it. Done pages stay, with their owner,
-- until their publish goes: they say which node sent how much.
-- publishes.lease_owner, lease_until_ms and lease_epoch are no longer used.
-- Conventions as in 0001_init.sql.
CREATE TABLE publish_pages (
    id             INTEGER PRIMARY KEY,
    publish_id     TEXT    NOT NULL REFERENCES publishes (id) ON DELETE CASCADE,
    stream         TEXT    NOT NULL,
    after_cursor   TEXT    NOT NULL,
    end_cursor     TEXT    NOT NULL,
    owner          TEXT    NOT NULL,
    epoch          INTEGER NOT NULL,
    lease_until_ms INTEGER NOT NULL,
    done           INTEGER NOT NULL,
    targeted       INTEGER NOT NULL,
    sent           INTEGER NOT NULL,
    failed         INTEGER NOT NULL
) STRICT;

-- A publish's pages: its open ones (resolution, takeover, a restarted
-- node's release through the unresolved publishes) and its split. The one
-- index besides the key: each costs every page a write when claimed and
-- another when recorded.
CREATE INDEX publish_pages_publish ON publish_pages (publish_id, done, lease_until_ms);

