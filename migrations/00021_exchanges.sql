-- Exchanges (engine.Exchange): a confirmed booking gives back some of its seats and
-- places and takes those of a new hold of its holder, in one transaction, under the
-- same booking id and the new hold's generation.
--
--   * A booking's places of one area may come from several holds over its life (its
--     first hold's, then an exchange's), so a booking_places row is keyed by its hold:
--     the key is (show, area, hold_id) — a hold's places of an area are booked once,
--     ever — and a booking has at most one claimed row per area
--     (booking_places_claimed_once). An exchange that adds places of an area the booking
--     keeps unclaims the old row and claims one of the sum under the new hold.
--   * holder_seats_add counts seats an exchange adds to an existing booking (a new
--     booking's seats are counted by the bookings trigger), refused past the show's
--     holder limit as a confirmation is (holder_seats_within_limit).
--   * booking_details lists a booking that is not confirmed with the places it had when
--     it ended: the rows of its last generation (every claim of a booking is at its
--     generation), not those an exchange unclaimed before.
--   * booking_events_exchanged_idx finds an exchange's event by booking and generation:
--     the engine settles an exchange whose COMMIT reply was lost by it.

-- +goose Up
ALTER TABLE booking_places DROP CONSTRAINT booking_places_pkey;
ALTER TABLE booking_places ADD CONSTRAINT booking_places_pkey PRIMARY KEY (show_id, area_id, hold_id);
CREATE UNIQUE INDEX booking_places_claimed_once ON booking_places (show_id, booking_id, area_id) WHERE claimed;
CREATE INDEX booking_places_booking_idx ON booking_places (show_id, booking_id);

-- +goose StatementBegin
CREATE FUNCTION holder_seats_add(p_show text, p_holder text, n integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    total integer;
    lim integer;
BEGIN
    IF p_holder = '' OR n = 0 THEN
        RETURN 0;
    END IF;
    INSERT INTO holder_seats AS h (show_id, holder_id, seats) VALUES (p_show, p_holder, n)
    ON CONFLICT (show_id, holder_id) DO UPDATE SET seats = h.seats + EXCLUDED.seats, version = h.version + 1
    RETURNING seats INTO total;
    SELECT holder_limit INTO lim FROM shows WHERE show_id = p_show;
    IF lim > 0 AND total > lim THEN
        RAISE EXCEPTION 'holder % would have % seats and places of show %, past its limit of %', p_holder, total, p_show, lim
            USING ERRCODE = 'check_violation', CONSTRAINT = 'holder_seats_within_limit';
    END IF;
    RETURN total;
END;
$$;
-- +goose StatementEnd

CREATE INDEX booking_events_exchanged_idx ON booking_events (booking_id, generation) WHERE kind = 'exchanged';

CREATE OR REPLACE VIEW booking_details AS
SELECT b.show_id, b.booking_id, b.generation, b.holder_id, b.fingerprint, b.status,
       b.confirmed_at, b.cancelled_at,
       ARRAY(SELECT bs.seat_id FROM booking_seats bs
             WHERE bs.show_id = b.show_id AND bs.booking_id = b.booking_id
             ORDER BY bs.seat_id)::text[] AS seat_ids,
       ARRAY(SELECT p.area_id || '~' || p.places || '~' || p.hold_id FROM booking_places p
             WHERE p.show_id = b.show_id AND p.booking_id = b.booking_id
               AND (p.claimed OR (b.status <> 'confirmed' AND p.generation = b.generation))
             ORDER BY p.area_id)::text[] AS place_keys,
       b.offer
FROM bookings b;

-- +goose Down
CREATE OR REPLACE VIEW booking_details AS
SELECT b.show_id, b.booking_id, b.generation, b.holder_id, b.fingerprint, b.status,
       b.confirmed_at, b.cancelled_at,
       ARRAY(SELECT bs.seat_id FROM booking_seats bs
             WHERE bs.show_id = b.show_id AND bs.booking_id = b.booking_id
             ORDER BY bs.seat_id)::text[] AS seat_ids,
       ARRAY(SELECT p.area_id || '~' || p.places || '~' || p.hold_id FROM booking_places p
             WHERE p.show_id = b.show_id AND p.booking_id = b.booking_id AND (p.claimed OR b.status <> 'confirmed')
             ORDER BY p.area_id)::text[] AS place_keys,
       b.offer
FROM bookings b;
DROP INDEX booking_events_exchanged_idx;
DROP FUNCTION holder_seats_add(text, text, integer);
DROP INDEX booking_places_booking_idx;
DROP INDEX booking_places_claimed_once;
ALTER TABLE booking_places DROP CONSTRAINT booking_places_pkey;
ALTER TABLE booking_places ADD CONSTRAINT booking_places_pkey PRIMARY KEY (show_id, booking_id, area_id);
