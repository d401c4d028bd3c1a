-- name: BookingCreate :batchone
-- BookingCreate records a confirmed booking in one statement: the booking, its seats,
-- the seat claims (a seat claimed already is a unique violation on seat_claims_pkey) and
-- the "confirmed" event, and the sold markers it owes Redis (marker_outbox). Run it after
-- SeatFencesAdvance accepted every seat. A hold that made a booking already is a unique
-- violation on bookings_hold_unique. The booking's places (@place_areas, @place_counts,
-- @place_holds, one element per area) are claimed too (booking_places; past an area's
-- capacity a check violation on areas_sold_within_capacity), and their place keys
-- (engine/areas.go) follow the seats in the event's and the outbox row's seat_ids. The
-- booking keeps its hold's @offer ('' for none).
WITH booking AS (
    INSERT INTO bookings (show_id, booking_id, generation, holder_id, idempotency_key, fingerprint, hold_hash, offer)
    VALUES (@show_id, @booking_id, @generation::bigint, @holder_id, sqlc.narg(idempotency_key), @fingerprint, @hold_hash,
            NULLIF(@offer::text, ''))
    RETURNING show_id, booking_id, confirmed_at
), booked_seats AS (
    INSERT INTO booking_seats (show_id, booking_id, seat_id)
    SELECT booking.show_id, booking.booking_id, s
    FROM booking, unnest(@seat_ids::text[]) AS s
    RETURNING show_id, booking_id, seat_id
), claims AS (
    INSERT INTO seat_claims (show_id, seat_id, booking_id, generation)
    SELECT show_id, seat_id, booking_id, @generation::bigint
    FROM booked_seats
    ORDER BY seat_id
    RETURNING seat_id
), places AS (
    INSERT INTO booking_places (show_id, booking_id, area_id, places, generation, hold_id)
    SELECT booking.show_id, booking.booking_id, p.area_id, p.places, @generation::bigint, p.hold_id
    FROM booking, (SELECT unnest(@place_areas::text[]) AS area_id, unnest(@place_counts::int[]) AS places,
                          unnest(@place_holds::text[]) AS hold_id) AS p
    ORDER BY p.area_id
), event AS (
    INSERT INTO booking_events (show_id, booking_id, kind, generation, seat_ids, holder_id)
    SELECT show_id, booking_id, 'confirmed', @generation::bigint, @seat_ids::text[] || @place_keys::text[], @holder_id
    FROM booking
    RETURNING event_id
), marker AS (
    INSERT INTO marker_outbox (show_id, generation, sold, seat_ids)
    SELECT show_id, @generation::bigint, true, @seat_ids::text[] || @place_keys::text[]
    FROM booking
    RETURNING seq
)
SELECT booking.confirmed_at, marker.seq AS marker_seq FROM booking, marker;

-- name: BookingCreateMany :many
-- BookingCreateMany is BookingCreate for a batch of bookings, each table written in one
-- statement: booking i is (@show_ids[i], @booking_ids[i], @generations[i], …, '' for no
-- idempotency key), and its seats are the @seat_ids whose @seat_bookings entry is i (from
-- 1), its hold's offer @offers[i] ('' for none). It returns each booking's time and marker_outbox row. Run it after
-- SeatFencesAdvanceMany accepted every seat. Any violation fails the whole statement
-- (BookingCreate, one booking each, tells which booking it was). Its places are the
-- @place_areas (@place_counts, @place_holds, @place_keys) whose @place_bookings entry is
-- i, as in BookingCreate; its hold's offer is @offers[i] ('' for none).
WITH input AS (
    SELECT unnest(@show_ids::text[]) AS show_id, unnest(@booking_ids::uuid[]) AS booking_id,
           unnest(@generations::bigint[]) AS generation, unnest(@holder_ids::text[]) AS holder_id,
           unnest(@idempotency_keys::text[]) AS idempotency_key, unnest(@fingerprints::bytea[]) AS fingerprint,
           unnest(@hold_hashes::bytea[]) AS hold_hash, unnest(@offers::text[]) AS offer, generate_series(1, cardinality(@show_ids::text[]))::bigint AS i
), seat_input AS (
    SELECT input.show_id, input.booking_id, input.generation, s.seat_id
    FROM (SELECT unnest(@seat_bookings::bigint[]) AS i, unnest(@seat_ids::text[]) AS seat_id) AS s
    JOIN input ON input.i = s.i
), place_input AS (
    SELECT input.show_id, input.booking_id, input.generation, p.area_id, p.places, p.hold_id, p.place_key
    FROM (SELECT unnest(@place_bookings::bigint[]) AS i, unnest(@place_areas::text[]) AS area_id,
                 unnest(@place_counts::int[]) AS places, unnest(@place_holds::text[]) AS hold_id,
                 unnest(@place_keys::text[]) AS place_key) AS p
    JOIN input ON input.i = p.i
), seat_lists AS (
    SELECT input.booking_id,
           (COALESCE((SELECT array_agg(s.seat_id ORDER BY s.seat_id) FROM seat_input s WHERE s.booking_id = input.booking_id), '{}')
            || COALESCE((SELECT array_agg(p.place_key ORDER BY p.area_id) FROM place_input p WHERE p.booking_id = input.booking_id), '{}'))::text[] AS seat_ids
    FROM input
), booking AS (
    INSERT INTO bookings (show_id, booking_id, generation, holder_id, idempotency_key, fingerprint, hold_hash, offer)
    SELECT show_id, booking_id, generation, holder_id, NULLIF(idempotency_key, ''), fingerprint, hold_hash, NULLIF(offer, '')
    FROM input
    RETURNING booking_id, confirmed_at
), booked_seats AS (
    INSERT INTO booking_seats (show_id, booking_id, seat_id)
    SELECT show_id, booking_id, seat_id FROM seat_input
), claims AS (
    INSERT INTO seat_claims (show_id, seat_id, booking_id, generation)
    SELECT show_id, seat_id, booking_id, generation FROM seat_input
    ORDER BY show_id, seat_id
), places AS (
    INSERT INTO booking_places (show_id, booking_id, area_id, places, generation, hold_id)
    SELECT show_id, booking_id, area_id, places, generation, hold_id FROM place_input
    ORDER BY show_id, area_id
), event AS (
    INSERT INTO booking_events (show_id, booking_id, kind, generation, seat_ids, holder_id)
    SELECT input.show_id, input.booking_id, 'confirmed', input.generation, l.seat_ids, input.holder_id
    FROM input JOIN seat_lists l USING (booking_id)
    ORDER BY input.i
), marker AS (
    INSERT INTO marker_outbox (show_id, generation, sold, seat_ids)
    SELECT input.show_id, input.generation, true, l.seat_ids
    FROM input JOIN seat_lists l USING (booking_id)
    ORDER BY input.i
    RETURNING show_id, generation, seat_ids, seq
)
SELECT booking.booking_id, booking.confirmed_at, marker.seq AS marker_seq
FROM input
JOIN booking USING (booking_id)
JOIN seat_lists l USING (booking_id)
JOIN marker ON marker.show_id = input.show_id AND marker.generation = input.generation AND marker.seat_ids = l.seat_ids
ORDER BY input.i;

-- name: BookingGet :one
SELECT * FROM booking_details WHERE booking_id = @booking_id;

-- name: BookingGetByIdempotencyKey :one
SELECT * FROM booking_details
WHERE booking_id = (
    SELECT b.booking_id FROM bookings b
    WHERE b.show_id = @show_id AND b.holder_id = @holder_id AND b.idempotency_key = @idempotency_key::text
);

-- name: BookingGetForUpdate :one
SELECT show_id, booking_id, generation, holder_id, status
FROM bookings WHERE booking_id = @booking_id
FOR UPDATE;

-- name: BookingCancel :one
UPDATE bookings SET status = 'cancelled', cancelled_at = now()
WHERE show_id = @show_id AND booking_id = @booking_id AND status = 'confirmed'
RETURNING cancelled_at;

-- name: BookingTransfer :execrows
-- BookingTransfer moves a confirmed booking to @holder_id (migration 00013 moves its
-- seats between the holders' counts). Its idempotency key was the old holder's request
-- and goes with the move: keys are scoped to the holder.
UPDATE bookings SET holder_id = @holder_id, idempotency_key = NULL
WHERE show_id = @show_id AND booking_id = @booking_id AND status = 'confirmed';

-- name: BookingEventInsert :exec
-- BookingEventInsert appends to the event log (refusals and repairs; the confirmed event
-- is written by BookingCreate).
INSERT INTO booking_events (show_id, booking_id, kind, generation, seat_ids, holder_id)
VALUES (@show_id, sqlc.narg(booking_id), @kind, @generation::bigint, @seat_ids::text[], @holder_id);

-- name: BookingGetByHold :one
-- BookingGetByHold finds the booking a hold (its hold_hash) made, cancelled or not: a
-- hold makes at most one.
SELECT * FROM booking_details
WHERE booking_id = (
    SELECT b.booking_id FROM bookings b WHERE b.show_id = @show_id AND b.hold_hash = @hold_hash
);

-- name: BookingListByHolder :many
-- BookingListByHolder reads a holder's bookings newest first, after the booking
-- @after (none: from the newest).
SELECT d.* FROM booking_details d
WHERE d.booking_id IN (
    SELECT b.booking_id FROM bookings b
    WHERE b.holder_id = @holder_id
      AND (sqlc.narg(after)::uuid IS NULL OR (b.confirmed_at, b.booking_id) <
          (SELECT a.confirmed_at, a.booking_id FROM bookings a WHERE a.booking_id = sqlc.narg(after) AND a.holder_id = @holder_id))
    ORDER BY b.confirmed_at DESC, b.booking_id DESC
    LIMIT @max_rows)
ORDER BY d.confirmed_at DESC, d.booking_id DESC;
