-- name: BookingLockSkip :one
-- BookingLockSkip locks a booking's row unless another transaction holds it (no row
-- then: a batch never waits for a lock).
SELECT show_id, booking_id, generation, holder_id, status, offer
FROM bookings WHERE show_id = @show_id AND booking_id = @booking_id
FOR UPDATE SKIP LOCKED;

-- name: BookingExchange :execrows
-- BookingExchange moves a confirmed booking to the generation of the hold it takes, and
-- to that hold's offer when it has one. Its claims are deleted first: each names the
-- booking's generation (seat_claims_booking_fkey).
UPDATE bookings SET generation = @generation::bigint, offer = COALESCE(NULLIF(@offer::text, ''), offer)
WHERE show_id = @show_id AND booking_id = @booking_id AND status = 'confirmed' AND generation < @generation::bigint;

-- name: BookingSeatsAdd :exec
-- BookingSeatsAdd puts seats into an existing booking (their claims follow).
INSERT INTO booking_seats (show_id, booking_id, seat_id)
SELECT @show_id, @booking_id, s FROM unnest(@seat_ids::text[]) AS s;

-- name: SeatClaimsAdd :execrows
-- SeatClaimsAdd claims seats for a booking at its generation (each seat's fence is
-- there already: seat_claims_at_fence). A seat claimed already is a unique violation
-- on seat_claims_pkey.
INSERT INTO seat_claims (show_id, seat_id, booking_id, generation)
SELECT @show_id, s, @booking_id, @generation::bigint FROM unnest(@seat_ids::text[]) AS s
ORDER BY s;

-- name: HolderSeatsAdd :one
-- HolderSeatsAdd counts @seats more seats of a holder's bookings (migration 00021).
SELECT holder_seats_add(@show_id, @holder_id, @seats::int)::int AS total;

-- name: BookingPlacesClaim :exec
-- BookingPlacesClaim claims places of an area for a booking at its generation under the
-- hold @hold_id (booking_places_claim counts them, within the capacity and the limit).
INSERT INTO booking_places (show_id, booking_id, area_id, places, generation, hold_id)
VALUES (@show_id, @booking_id, @area_id, @places::int, @generation::bigint, @hold_id);

-- name: ExchangeAt :one
-- ExchangeAt is when the exchange that moved a booking to @generation committed.
SELECT at FROM booking_events
WHERE booking_id = @booking_id AND generation = @generation::bigint AND kind = 'exchanged'
LIMIT 1;
