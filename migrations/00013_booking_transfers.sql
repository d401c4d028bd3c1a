-- Bookings moved to another holder (engine/transfer.go, TransferBooking).
--
-- A confirmed booking's holder_id may change, in the transaction that writes its
-- 'transferred' event. Its seats and claimed places leave the old holder's count in
-- holder_seats and join the new holder's, which is refused past the show's holder limit
-- as a confirmation is (holder_seats_within_limit).
--
-- The event kinds are the feed's of the API contract (confirmed, cancelled,
-- seats_cancelled, exchanged, transferred, lost) and the operators' log's; the feed's
-- index covers the feed's kinds.

-- +goose Up
ALTER TABLE booking_events DROP CONSTRAINT booking_events_kind_valid;
ALTER TABLE booking_events ADD CONSTRAINT booking_events_kind_valid CHECK (kind IN (
    'confirmed', 'cancelled', 'seats_cancelled', 'exchanged', 'transferred', 'lost',
    'refused_stale', 'refused_taken', 'refused_lost', 'counter_repaired', 'marker_repaired'));
DROP INDEX booking_events_feed_idx;
CREATE INDEX booking_events_feed_idx ON booking_events (txid, event_id)
    WHERE kind IN ('confirmed', 'cancelled', 'seats_cancelled', 'exchanged', 'transferred', 'lost');

-- +goose StatementBegin
CREATE FUNCTION holder_seats_transfer() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    n integer;
    total integer;
    lim integer;
BEGIN
    IF NEW.status <> 'confirmed' OR OLD.status <> 'confirmed' THEN
        RAISE EXCEPTION 'bookings: only a confirmed booking changes holder (booking % of show %)', NEW.booking_id, NEW.show_id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'bookings_transfer_confirmed';
    END IF;
    SELECT (SELECT count(*) FROM booking_seats WHERE show_id = NEW.show_id AND booking_id = NEW.booking_id)
         + (SELECT COALESCE(sum(places), 0) FROM booking_places WHERE show_id = NEW.show_id AND booking_id = NEW.booking_id AND claimed)
    INTO n;
    IF OLD.holder_id <> '' THEN
        UPDATE holder_seats SET seats = seats - n, version = version + 1
        WHERE show_id = NEW.show_id AND holder_id = OLD.holder_id;
    END IF;
    IF NEW.holder_id = '' THEN
        RETURN NULL;
    END IF;
    INSERT INTO holder_seats AS h (show_id, holder_id, seats) VALUES (NEW.show_id, NEW.holder_id, n)
    ON CONFLICT (show_id, holder_id) DO UPDATE SET seats = h.seats + EXCLUDED.seats, version = h.version + 1
    RETURNING seats INTO total;
    SELECT holder_limit INTO lim FROM shows WHERE show_id = NEW.show_id;
    IF lim > 0 AND total > lim THEN
        RAISE EXCEPTION 'holder % would have % seats and places of show %, past its limit of %', NEW.holder_id, total, NEW.show_id, lim
            USING ERRCODE = 'check_violation', CONSTRAINT = 'holder_seats_within_limit';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER holder_seats_transfer
    AFTER UPDATE OF holder_id ON bookings
    FOR EACH ROW WHEN (OLD.holder_id IS DISTINCT FROM NEW.holder_id)
    EXECUTE FUNCTION holder_seats_transfer();

-- +goose Down
DROP TRIGGER holder_seats_transfer ON bookings;
DROP FUNCTION holder_seats_transfer();
DROP INDEX booking_events_feed_idx;
CREATE INDEX booking_events_feed_idx ON booking_events (txid, event_id)
    WHERE kind IN ('confirmed', 'cancelled', 'seats_cancelled', 'lost');
ALTER TABLE booking_events DROP CONSTRAINT booking_events_kind_valid;
ALTER TABLE booking_events ADD CONSTRAINT booking_events_kind_valid CHECK (kind IN (
    'confirmed', 'cancelled', 'seats_cancelled', 'lost', 'refused_stale', 'refused_taken', 'refused_lost', 'counter_repaired', 'marker_repaired'));
