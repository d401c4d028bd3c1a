-- The idempotency keys of the writes on a booking (engine.Cancel, CancelSeats and
-- TransferBooking; engine/idempotency.go). Each is written in the transaction of the
-- change it names, with the request's fingerprint and the answer the change gave (the
-- booking as it left it), so that a retry under the key gets that answer and changes
-- nothing, and another request under it is refused. A key is scoped to its booking and
-- to the side that made the write (scope: "holder" for the booking's holder, whoever
-- holds it then, "operator" for an operator's transfer), and lives as long as the
-- booking does. (A confirmation's key is the booking's own
-- bookings.idempotency_key.)

-- +goose Up
CREATE TABLE booking_write_keys (
    show_id         text        NOT NULL,
    booking_id      uuid        NOT NULL,
    scope           text        NOT NULL,
    idempotency_key text        NOT NULL,
    fingerprint     bytea       NOT NULL,
    answer          jsonb       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT booking_write_keys_pkey PRIMARY KEY (booking_id, scope, idempotency_key),
    CONSTRAINT booking_write_keys_booking_fkey FOREIGN KEY (show_id, booking_id)
        REFERENCES bookings (show_id, booking_id) ON DELETE CASCADE,
    CONSTRAINT booking_write_keys_key_length CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    CONSTRAINT booking_write_keys_fingerprint_sha256 CHECK (length(fingerprint) = 32)
);
CREATE INDEX booking_write_keys_show_idx ON booking_write_keys (show_id, booking_id);

-- +goose Down
DROP TABLE booking_write_keys;
