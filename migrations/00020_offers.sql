-- A booking keeps its hold's offer (engine.Hold.Offer: an opaque string of at most 256
-- bytes the backend gave the hold — a price tier, a price-list version), unchanged, so
-- the backend can honour the price shown when the seat was held. NULL: no offer.

-- +goose Up
ALTER TABLE bookings ADD COLUMN offer text
    CONSTRAINT bookings_offer_size CHECK (octet_length(offer) BETWEEN 1 AND 256);

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

-- +goose Down
DROP VIEW booking_details;
CREATE VIEW booking_details AS
SELECT b.show_id, b.booking_id, b.generation, b.holder_id, b.fingerprint, b.status,
       b.confirmed_at, b.cancelled_at,
       ARRAY(SELECT bs.seat_id FROM booking_seats bs
             WHERE bs.show_id = b.show_id AND bs.booking_id = b.booking_id
             ORDER BY bs.seat_id)::text[] AS seat_ids,
       ARRAY(SELECT p.area_id || '~' || p.places || '~' || p.hold_id FROM booking_places p
             WHERE p.show_id = b.show_id AND p.booking_id = b.booking_id AND (p.claimed OR b.status <> 'confirmed')
             ORDER BY p.area_id)::text[] AS place_keys
FROM bookings b;
ALTER TABLE bookings DROP COLUMN offer;
