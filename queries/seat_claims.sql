-- name: SeatClaimListByShow :many
SELECT seat_id, booking_id, generation FROM seat_claims WHERE show_id = @show_id ORDER BY seat_id;

-- name: SeatClaimListBySeats :many
SELECT seat_id, booking_id, generation FROM seat_claims
WHERE show_id = @show_id AND seat_id = ANY(@seat_ids::text[])
ORDER BY seat_id;

-- name: SeatClaimsDeleteByBooking :execrows
DELETE FROM seat_claims WHERE show_id = @show_id AND booking_id = @booking_id;
