-- name: BookingWriteKeyGet :one
SELECT fingerprint, answer FROM booking_write_keys
WHERE booking_id = $1 AND scope = $2 AND idempotency_key = $3;

-- name: BookingWriteKeyInsert :exec
INSERT INTO booking_write_keys (show_id, booking_id, scope, idempotency_key, fingerprint, answer)
VALUES ($1, $2, $3, $4, $5, $6);
