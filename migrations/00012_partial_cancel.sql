-- Partial cancellations (engine.CancelSeats): part of a confirmed booking's seats and
-- places cancelled, the rest still booked.
--
-- A seat cancelled leaves the booking: its claim goes, then its booking_seats row (the
-- event log keeps what the booking had). Places cancelled in part lower their row's
-- places while it stays claimed, and the area's sold and the holder's count follow; all
-- of an area's places cancelled unclaim the row, as a cancellation does. A confirmed
-- booking lists only its claimed places (booking_details), a cancelled one every row
-- (their place keys are the tombstones it owes Redis). seats_cancelled is the event of a
-- partial cancellation, in the feed with the others.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION booking_places_claim() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    b record;
    total integer;
    lim integer;
    d integer;
    lowered boolean;
BEGIN
    lowered := TG_OP = 'UPDATE' AND OLD.claimed AND NEW.claimed AND NEW.places < OLD.places
        AND (NEW.show_id, NEW.booking_id, NEW.area_id, NEW.generation, NEW.hold_id)
            IS NOT DISTINCT FROM (OLD.show_id, OLD.booking_id, OLD.area_id, OLD.generation, OLD.hold_id);
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND NOT lowered AND (NOT OLD.claimed OR NEW.claimed
            OR (NEW.show_id, NEW.booking_id, NEW.area_id, NEW.places, NEW.generation, NEW.hold_id)
               IS DISTINCT FROM (OLD.show_id, OLD.booking_id, OLD.area_id, OLD.places, OLD.generation, OLD.hold_id))) THEN
        RAISE EXCEPTION 'booking_places rows are only lowered while claimed, and unclaimed once'
            USING ERRCODE = 'restrict_violation', CONSTRAINT = 'booking_places_claim_once';
    END IF;
    SELECT generation, holder_id, status INTO b FROM bookings WHERE show_id = NEW.show_id AND booking_id = NEW.booking_id;
    IF TG_OP = 'INSERT' THEN
        IF NOT NEW.claimed OR b.status <> 'confirmed' OR b.generation <> NEW.generation THEN
            RAISE EXCEPTION 'places of area % claimed by booking % that is not confirmed with generation %', NEW.area_id, NEW.booking_id, NEW.generation
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'booking_places_claim_booking';
        END IF;
        d := NEW.places;
    ELSIF lowered THEN
        d := NEW.places - OLD.places;
    ELSE
        d := -NEW.places;
    END IF;
    UPDATE areas SET sold = sold + d, generation = greatest(generation, NEW.generation)
    WHERE show_id = NEW.show_id AND area_id = NEW.area_id;
    IF b.holder_id = '' THEN
        RETURN NULL;
    END IF;
    IF d < 0 THEN
        UPDATE holder_seats SET seats = seats + d, version = version + 1
        WHERE show_id = NEW.show_id AND holder_id = b.holder_id;
        RETURN NULL;
    END IF;
    INSERT INTO holder_seats AS h (show_id, holder_id, seats) VALUES (NEW.show_id, b.holder_id, d)
    ON CONFLICT (show_id, holder_id) DO UPDATE SET seats = h.seats + EXCLUDED.seats, version = h.version + 1
    RETURNING seats INTO total;
    SELECT holder_limit INTO lim FROM shows WHERE show_id = NEW.show_id;
    IF lim > 0 AND total > lim THEN
        RAISE EXCEPTION 'holder % would have % seats and places of show %, past its limit of %', b.holder_id, total, NEW.show_id, lim
            USING ERRCODE = 'check_violation', CONSTRAINT = 'holder_seats_within_limit';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE OR REPLACE VIEW booking_details AS
SELECT b.show_id, b.booking_id, b.generation, b.holder_id, b.fingerprint, b.status,
       b.confirmed_at, b.cancelled_at,
       ARRAY(SELECT bs.seat_id FROM booking_seats bs
             WHERE bs.show_id = b.show_id AND bs.booking_id = b.booking_id
             ORDER BY bs.seat_id)::text[] AS seat_ids,
       ARRAY(SELECT p.area_id || '~' || p.places || '~' || p.hold_id FROM booking_places p
             WHERE p.show_id = b.show_id AND p.booking_id = b.booking_id AND (p.claimed OR b.status <> 'confirmed')
             ORDER BY p.area_id)::text[] AS place_keys
FROM bookings b;

ALTER TABLE booking_events DROP CONSTRAINT booking_events_kind_valid;
ALTER TABLE booking_events ADD CONSTRAINT booking_events_kind_valid CHECK (kind IN (
    'confirmed', 'cancelled', 'seats_cancelled', 'lost', 'refused_stale', 'refused_taken', 'refused_lost', 'counter_repaired', 'marker_repaired'));
ALTER TABLE booking_events DROP CONSTRAINT booking_events_booking_required;
ALTER TABLE booking_events ADD CONSTRAINT booking_events_booking_required
    CHECK (booking_id IS NOT NULL OR kind NOT IN ('confirmed', 'cancelled', 'seats_cancelled'));
DROP INDEX booking_events_feed_idx;
CREATE INDEX booking_events_feed_idx ON booking_events (txid, event_id)
    WHERE kind IN ('confirmed', 'cancelled', 'seats_cancelled', 'lost');

-- +goose Down
DROP INDEX booking_events_feed_idx;
CREATE INDEX booking_events_feed_idx ON booking_events (txid, event_id)
    WHERE kind IN ('confirmed', 'cancelled', 'lost');
ALTER TABLE booking_events DROP CONSTRAINT booking_events_booking_required;
ALTER TABLE booking_events ADD CONSTRAINT booking_events_booking_required
    CHECK (booking_id IS NOT NULL OR kind NOT IN ('confirmed', 'cancelled'));
ALTER TABLE booking_events DROP CONSTRAINT booking_events_kind_valid;
ALTER TABLE booking_events ADD CONSTRAINT booking_events_kind_valid CHECK (kind IN (
    'confirmed', 'cancelled', 'lost', 'refused_stale', 'refused_taken', 'refused_lost', 'counter_repaired', 'marker_repaired'));
CREATE OR REPLACE VIEW booking_details AS
SELECT b.show_id, b.booking_id, b.generation, b.holder_id, b.fingerprint, b.status,
       b.confirmed_at, b.cancelled_at,
       ARRAY(SELECT bs.seat_id FROM booking_seats bs
             WHERE bs.show_id = b.show_id AND bs.booking_id = b.booking_id
             ORDER BY bs.seat_id)::text[] AS seat_ids,
       ARRAY(SELECT p.area_id || '~' || p.places || '~' || p.hold_id FROM booking_places p
             WHERE p.show_id = b.show_id AND p.booking_id = b.booking_id
             ORDER BY p.area_id)::text[] AS place_keys
FROM bookings b;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION booking_places_claim() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    b record;
    total integer;
    lim integer;
    d integer;
BEGIN
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND (NOT OLD.claimed OR NEW.claimed
            OR (NEW.show_id, NEW.booking_id, NEW.area_id, NEW.places, NEW.generation, NEW.hold_id)
               IS DISTINCT FROM (OLD.show_id, OLD.booking_id, OLD.area_id, OLD.places, OLD.generation, OLD.hold_id))) THEN
        RAISE EXCEPTION 'booking_places rows are only unclaimed, once'
            USING ERRCODE = 'restrict_violation', CONSTRAINT = 'booking_places_claim_once';
    END IF;
    SELECT generation, holder_id, status INTO b FROM bookings WHERE show_id = NEW.show_id AND booking_id = NEW.booking_id;
    IF TG_OP = 'INSERT' THEN
        IF NOT NEW.claimed OR b.status <> 'confirmed' OR b.generation <> NEW.generation THEN
            RAISE EXCEPTION 'places of area % claimed by booking % that is not confirmed with generation %', NEW.area_id, NEW.booking_id, NEW.generation
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'booking_places_claim_booking';
        END IF;
        d := NEW.places;
    ELSE
        d := -NEW.places;
    END IF;
    UPDATE areas SET sold = sold + d, generation = greatest(generation, NEW.generation)
    WHERE show_id = NEW.show_id AND area_id = NEW.area_id;
    IF b.holder_id = '' THEN
        RETURN NULL;
    END IF;
    IF d < 0 THEN
        UPDATE holder_seats SET seats = seats + d, version = version + 1
        WHERE show_id = NEW.show_id AND holder_id = b.holder_id;
        RETURN NULL;
    END IF;
    INSERT INTO holder_seats AS h (show_id, holder_id, seats) VALUES (NEW.show_id, b.holder_id, d)
    ON CONFLICT (show_id, holder_id) DO UPDATE SET seats = h.seats + EXCLUDED.seats, version = h.version + 1
    RETURNING seats INTO total;
    SELECT holder_limit INTO lim FROM shows WHERE show_id = NEW.show_id;
    IF lim > 0 AND total > lim THEN
        RAISE EXCEPTION 'holder % would have % seats and places of show %, past its limit of %', b.holder_id, total, NEW.show_id, lim
            USING ERRCODE = 'check_violation', CONSTRAINT = 'holder_seats_within_limit';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
