-- Areas: general admission sold by count (engine/areas.go). An area is a capacity of
-- places in a show, beside its seats (an area id is never a seat id of the show).
-- booking_places is what a booking took of each area; its claimed rows are the sold
-- places, and areas.sold is their sum, kept by the trigger below under the area's row
-- lock, so that "sold ≤ capacity" is a CHECK whatever Redis says.

-- +goose Up
CREATE TABLE areas (
    show_id    text    NOT NULL,
    area_id    text    NOT NULL,
    section    text    NOT NULL DEFAULT '',
    capacity   integer NOT NULL,
    sold       integer NOT NULL DEFAULT 0,
    generation bigint  NOT NULL DEFAULT 0, -- the highest generation a confirmation of its places had
    CONSTRAINT areas_pkey PRIMARY KEY (show_id, area_id),
    CONSTRAINT areas_show_fkey FOREIGN KEY (show_id) REFERENCES shows (show_id) ON DELETE CASCADE,
    CONSTRAINT areas_area_id_format CHECK (area_id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    CONSTRAINT areas_section_format CHECK (section ~ '^([A-Za-z0-9][A-Za-z0-9 ._-]{0,31})?$'),
    CONSTRAINT areas_capacity_range CHECK (capacity BETWEEN 1 AND 1000000),
    CONSTRAINT areas_sold_within_capacity CHECK (sold BETWEEN 0 AND capacity),
    CONSTRAINT areas_generation_nonnegative CHECK (generation >= 0)
);

-- booking_places: the places of each booking, by area. claimed is true while the booking
-- is confirmed (a cancellation sets it false and the places are sellable again); hold_id
-- names the hold's place key in Redis (engine/areas.go).
CREATE TABLE booking_places (
    show_id    text    NOT NULL,
    booking_id uuid    NOT NULL,
    area_id    text    NOT NULL,
    places     integer NOT NULL,
    generation bigint  NOT NULL,
    hold_id    text    NOT NULL,
    claimed    boolean NOT NULL DEFAULT true,
    CONSTRAINT booking_places_pkey PRIMARY KEY (show_id, booking_id, area_id),
    CONSTRAINT booking_places_booking_fkey FOREIGN KEY (show_id, booking_id) REFERENCES bookings (show_id, booking_id),
    CONSTRAINT booking_places_area_fkey FOREIGN KEY (show_id, area_id) REFERENCES areas (show_id, area_id),
    CONSTRAINT booking_places_places_range CHECK (places BETWEEN 1 AND 1000000),
    CONSTRAINT booking_places_generation_positive CHECK (generation > 0),
    CONSTRAINT booking_places_hold_id_format CHECK (hold_id ~ '^[0-9a-f]{16}$')
);

CREATE INDEX booking_places_area_idx ON booking_places (show_id, area_id) WHERE claimed;

-- An area id is not a seat id of its show (the hold scripts tell them apart by the
-- seat and area lists the engine gives them, and a booking lists both).
-- +goose StatementBegin
CREATE FUNCTION areas_not_seats() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM seats WHERE show_id = NEW.show_id AND seat_id = NEW.area_id) THEN
        RAISE EXCEPTION 'area % of show % is a seat id', NEW.area_id, NEW.show_id
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'areas_not_seats';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER areas_not_seats
    BEFORE INSERT OR UPDATE OF area_id ON areas
    FOR EACH ROW EXECUTE FUNCTION areas_not_seats();

-- The claim. A claimed row names a confirmed booking of its generation and adds its
-- places to the area's sold (refused past the capacity: areas_sold_within_capacity) and
-- to its holder's count (refused past the holder limit: holder_seats_within_limit);
-- unclaiming (the booking's cancellation) gives them back. A row is never claimed
-- again, deleted, or changed otherwise.
-- +goose StatementBegin
CREATE FUNCTION booking_places_claim() RETURNS trigger
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
CREATE TRIGGER booking_places_claim
    AFTER INSERT OR UPDATE OR DELETE ON booking_places
    FOR EACH ROW EXECUTE FUNCTION booking_places_claim();

-- bookings_claims_whole: a confirmed booking claims every one of its seats and has a
-- seat or a place (a booking of places alone has no seats).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION bookings_claims_whole_all() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    SELECT b.show_id, b.booking_id INTO bad
    FROM new_bookings b
    WHERE b.status = 'confirmed'
      AND ((NOT EXISTS (SELECT 1 FROM booking_seats s WHERE s.show_id = b.show_id AND s.booking_id = b.booking_id)
            AND NOT EXISTS (SELECT 1 FROM booking_places p WHERE p.show_id = b.show_id AND p.booking_id = b.booking_id AND p.claimed))
           OR EXISTS (SELECT 1 FROM booking_seats s
                      WHERE s.show_id = b.show_id AND s.booking_id = b.booking_id
                        AND NOT EXISTS (SELECT 1 FROM seat_claims c
                                        WHERE c.show_id = s.show_id AND c.seat_id = s.seat_id AND c.booking_id = s.booking_id)))
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'bookings: confirmed booking % of show % lacks the claims of its seats or places', bad.booking_id, bad.show_id
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'bookings_claims_whole';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- booking_details gains each booking's place keys (engine/areas.go), by area.
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

-- A booking's cancellation unclaims its places (sellable again), in its statement.
-- +goose StatementBegin
CREATE FUNCTION bookings_unclaim_places() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'confirmed' AND NEW.status = 'cancelled' THEN
        UPDATE booking_places SET claimed = false
        WHERE show_id = NEW.show_id AND booking_id = NEW.booking_id AND claimed;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER bookings_unclaim_places
    AFTER UPDATE OF status ON bookings
    FOR EACH ROW EXECUTE FUNCTION bookings_unclaim_places();

-- +goose Down
DROP VIEW booking_details;
CREATE VIEW booking_details AS
SELECT b.show_id, b.booking_id, b.generation, b.holder_id, b.fingerprint, b.status,
       b.confirmed_at, b.cancelled_at,
       ARRAY(SELECT bs.seat_id FROM booking_seats bs
             WHERE bs.show_id = b.show_id AND bs.booking_id = b.booking_id
             ORDER BY bs.seat_id)::text[] AS seat_ids
FROM bookings b;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION bookings_claims_whole_all() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    SELECT b.show_id, b.booking_id INTO bad
    FROM new_bookings b
    WHERE b.status = 'confirmed'
      AND (NOT EXISTS (SELECT 1 FROM booking_seats s WHERE s.show_id = b.show_id AND s.booking_id = b.booking_id)
           OR EXISTS (SELECT 1 FROM booking_seats s
                      WHERE s.show_id = b.show_id AND s.booking_id = b.booking_id
                        AND NOT EXISTS (SELECT 1 FROM seat_claims c
                                        WHERE c.show_id = s.show_id AND c.seat_id = s.seat_id AND c.booking_id = s.booking_id)))
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'bookings: confirmed booking % of show % lacks the claims of its seats', bad.booking_id, bad.show_id
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'bookings_claims_whole';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
DROP TRIGGER bookings_unclaim_places ON bookings;
DROP FUNCTION bookings_unclaim_places();
DROP TRIGGER booking_places_claim ON booking_places;
DROP FUNCTION booking_places_claim();
DROP TABLE booking_places;
DROP TRIGGER areas_not_seats ON areas;
DROP FUNCTION areas_not_seats();
DROP TABLE areas;
