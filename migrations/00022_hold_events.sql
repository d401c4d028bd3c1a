-- Hold moves in the event feed (engine/moves.go): Reclaim and Transfer give a hold a
-- new token, generation and (Transfer) holder, and leave an event, hold_reclaimed or
-- hold_transferred, with no booking:
--
--   * seat_ids has the hold's seats and place keys (as a booking event's: a place key
--     names its area and count), generation the new one, holder_id the holder now;
--   * from_holder_id is the holder before (hold_transferred; '' otherwise), expires_at
--     the hold's expiry (NULL for a booking's event);
--   * move_id identifies the move (engine/moves.go: a hash of the new token, never the
--     token itself). The engine relays a move from Redis to this table, perhaps twice
--     (two engines, a retry): booking_events_move_once keeps one event per move. Not
--     the generation: Redis's counter can go back (a failover, a Redis that lost the
--     show), and a later move given the same generation is another event.
--
-- The feed's kinds and its index take the two kinds. The columns are NULL or '' for the
-- other kinds: adding them rewrites nothing.

-- +goose Up
ALTER TABLE booking_events
    ADD COLUMN from_holder_id text NOT NULL DEFAULT '',
    ADD COLUMN expires_at timestamptz,
    ADD COLUMN move_id text,
    DROP CONSTRAINT booking_events_kind_valid,
    ADD CONSTRAINT booking_events_kind_valid CHECK (kind IN (
        'confirmed', 'cancelled', 'seats_cancelled', 'exchanged', 'transferred', 'lost', 'hold_reclaimed', 'hold_transferred',
        'refused_stale', 'refused_taken', 'refused_lost', 'counter_repaired', 'marker_repaired')),
    ADD CONSTRAINT booking_events_move_shape CHECK (
        (kind IN ('hold_reclaimed', 'hold_transferred')) = (move_id IS NOT NULL AND expires_at IS NOT NULL));
CREATE UNIQUE INDEX booking_events_move_once ON booking_events (show_id, move_id) WHERE move_id IS NOT NULL;
DROP INDEX booking_events_feed_idx;
CREATE INDEX booking_events_feed_idx ON booking_events (txid, event_id)
    WHERE kind IN ('confirmed', 'cancelled', 'seats_cancelled', 'exchanged', 'transferred', 'lost', 'hold_reclaimed', 'hold_transferred');

-- +goose Down
DROP INDEX booking_events_feed_idx;
CREATE INDEX booking_events_feed_idx ON booking_events (txid, event_id)
    WHERE kind IN ('confirmed', 'cancelled', 'seats_cancelled', 'exchanged', 'transferred', 'lost');
DROP INDEX booking_events_move_once;
-- Events are append-only: a database with hold events cannot go below this migration.
ALTER TABLE booking_events
    DROP CONSTRAINT booking_events_move_shape,
    DROP CONSTRAINT booking_events_kind_valid,
    ADD CONSTRAINT booking_events_kind_valid CHECK (kind IN (
        'confirmed', 'cancelled', 'seats_cancelled', 'exchanged', 'transferred', 'lost',
        'refused_stale', 'refused_taken', 'refused_lost', 'counter_repaired', 'marker_repaired')),
    DROP COLUMN move_id,
    DROP COLUMN expires_at,
    DROP COLUMN from_holder_id;
