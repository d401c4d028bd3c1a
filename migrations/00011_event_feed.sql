-- The event feed (engine/events.go) and its webhook deliveries (engine/webhooks.go).
--
-- A feed read from booking_events by event_id alone misses events: event_id is drawn
-- when a row is inserted, not when its transaction commits, so a reader can see 7
-- committed before 6 and never look back. Each row now carries the id of the
-- transaction that wrote it (txid, an xid8: 64 bits, never wraps), and the feed reads in
-- (txid, event_id) order only the rows of transactions below the oldest one still
-- running (pg_snapshot_xmin of the reader's snapshot): every transaction that could
-- still commit a row there has ended, so nothing can appear later behind the cursor. A
-- transaction that waits for its synchronous standby still counts as running, so the
-- feed shows only what the standby has: a promoted standby's transaction ids continue
-- above every one the feed showed.
--
-- The column's default is the writing transaction's id, so the statements that write
-- events (BookingCreate, BookingCreateMany, the cancellation) are unchanged: one more
-- column and one more index entry per event, no round trip.

-- +goose Up
ALTER TABLE booking_events ADD COLUMN txid xid8 NOT NULL DEFAULT pg_current_xact_id();

-- The feed: booking changes only (refusals and repairs stay in the log for operators).
CREATE INDEX booking_events_feed_idx ON booking_events (txid, event_id)
    WHERE kind IN ('confirmed', 'cancelled', 'lost');

-- lost: a booking that Redis saw committed and the database no longer has (a failover
-- to an asynchronous standby), written by Reconcile; once per booking (its generation).
ALTER TABLE booking_events DROP CONSTRAINT booking_events_kind_valid;
ALTER TABLE booking_events ADD CONSTRAINT booking_events_kind_valid CHECK (kind IN (
    'confirmed', 'cancelled', 'lost', 'refused_stale', 'refused_taken', 'refused_lost', 'counter_repaired', 'marker_repaired'));
CREATE UNIQUE INDEX booking_events_lost_once ON booking_events (show_id, generation) WHERE kind = 'lost';

-- One row per webhook endpoint (the SHA-256 of its URL: a URL may carry a secret):
-- the cursor of the last event it acknowledged, and the lease of the one engine that
-- delivers to it (holder, until lease_until by the database's clock).
CREATE TABLE webhook_deliveries (
    endpoint    text        PRIMARY KEY,
    delivered   text        NOT NULL DEFAULT '',
    holder      uuid,
    lease_until timestamptz NOT NULL DEFAULT '-infinity',
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP INDEX booking_events_lost_once;
ALTER TABLE booking_events DROP CONSTRAINT booking_events_kind_valid;
ALTER TABLE booking_events ADD CONSTRAINT booking_events_kind_valid CHECK (kind IN (
    'confirmed', 'cancelled', 'refused_stale', 'refused_taken', 'refused_lost', 'counter_repaired', 'marker_repaired'));
DROP INDEX booking_events_feed_idx;
ALTER TABLE booking_events DROP COLUMN txid;
