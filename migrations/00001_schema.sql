-- holdfast schema: the inventory, the per-seat fences, the seat claims, the bookings and
-- their append-only event log. show_id leads every key, so every table can later be
-- partitioned or distributed by show. The constraints state the engine's invariants in SQL.

-- +goose Up
CREATE TABLE shows (
    show_id    text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT shows_pkey PRIMARY KEY (show_id),
    CONSTRAINT shows_show_id_format CHECK (show_id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$')
);

-- seats is the inventory: a show's seats are fixed when the show is created.
CREATE TABLE seats (
    show_id text NOT NULL,
    seat_id text NOT NULL,
    CONSTRAINT seats_pkey PRIMARY KEY (show_id, seat_id),
    CONSTRAINT seats_show_fkey FOREIGN KEY (show_id) REFERENCES shows (show_id) ON DELETE CASCADE,
    CONSTRAINT seats_seat_id_format CHECK (seat_id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$')
);

-- seat_fences keeps, per seat, the highest hold generation a confirmation was accepted
-- with (0: none yet). It only ever grows: a confirmation advances it only with a strictly
-- larger generation, and cancelling a booking leaves it where it is.
CREATE TABLE seat_fences (
    show_id    text        NOT NULL,
    seat_id    text        NOT NULL,
    generation bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT seat_fences_pkey PRIMARY KEY (show_id, seat_id),
    CONSTRAINT seat_fences_seat_fkey FOREIGN KEY (show_id, seat_id) REFERENCES seats (show_id, seat_id) ON DELETE CASCADE,
    CONSTRAINT seat_fences_generation_nonnegative CHECK (generation >= 0)
);

CREATE TABLE bookings (
    show_id         text        NOT NULL,
    booking_id      uuid        NOT NULL,
    generation      bigint      NOT NULL,
    holder_id       text        NOT NULL DEFAULT '',
    idempotency_key text,
    fingerprint     bytea       NOT NULL,
    status          text        NOT NULL DEFAULT 'confirmed',
    confirmed_at    timestamptz NOT NULL DEFAULT now(),
    cancelled_at    timestamptz,
    CONSTRAINT bookings_pkey PRIMARY KEY (show_id, booking_id),
    CONSTRAINT bookings_show_fkey FOREIGN KEY (show_id) REFERENCES shows (show_id),
    CONSTRAINT bookings_generation_positive CHECK (generation > 0),
    CONSTRAINT bookings_status_valid CHECK (status IN ('confirmed', 'cancelled')),
    CONSTRAINT bookings_cancelled_at_iff_cancelled CHECK ((status = 'cancelled') = (cancelled_at IS NOT NULL)),
    CONSTRAINT bookings_holder_id_length CHECK (length(holder_id) <= 128),
    CONSTRAINT bookings_idempotency_key_length CHECK (idempotency_key IS NULL OR length(idempotency_key) BETWEEN 1 AND 255),
    CONSTRAINT bookings_fingerprint_sha256 CHECK (length(fingerprint) = 32),
    -- An idempotency key names one request of one holder (per show).
    CONSTRAINT bookings_idempotency_key_unique UNIQUE (show_id, holder_id, idempotency_key)
);

-- Booking ids are random UUIDs, looked up without their show.
CREATE INDEX bookings_booking_id_idx ON bookings (booking_id);

-- booking_seats lists the seats of each booking, cancelled ones included.
CREATE TABLE booking_seats (
    show_id    text NOT NULL,
    booking_id uuid NOT NULL,
    seat_id    text NOT NULL,
    CONSTRAINT booking_seats_pkey PRIMARY KEY (show_id, booking_id, seat_id),
    CONSTRAINT booking_seats_booking_fkey FOREIGN KEY (show_id, booking_id) REFERENCES bookings (show_id, booking_id) ON DELETE CASCADE,
    CONSTRAINT booking_seats_seat_fkey FOREIGN KEY (show_id, seat_id) REFERENCES seats (show_id, seat_id)
);

-- seat_claims is the sold state: one row per confirmed seat, whatever Redis says. A
-- cancellation deletes the claim (not the fence).
CREATE TABLE seat_claims (
    show_id    text        NOT NULL,
    seat_id    text        NOT NULL,
    booking_id uuid        NOT NULL,
    generation bigint      NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT seat_claims_pkey PRIMARY KEY (show_id, seat_id),
    CONSTRAINT seat_claims_fence_fkey FOREIGN KEY (show_id, seat_id) REFERENCES seat_fences (show_id, seat_id),
    CONSTRAINT seat_claims_booking_seat_fkey FOREIGN KEY (show_id, booking_id, seat_id) REFERENCES booking_seats (show_id, booking_id, seat_id),
    CONSTRAINT seat_claims_generation_positive CHECK (generation > 0)
);

CREATE INDEX seat_claims_booking_idx ON seat_claims (show_id, booking_id);

-- booking_events is append-only: what happened, for operators who reconcile after Redis
-- forgot. A trigger refuses UPDATE and DELETE.
CREATE TABLE booking_events (
    show_id    text        NOT NULL,
    event_id   bigint      GENERATED ALWAYS AS IDENTITY,
    booking_id uuid,
    kind       text        NOT NULL,
    generation bigint      NOT NULL,
    seat_ids   text[]      NOT NULL,
    holder_id  text        NOT NULL DEFAULT '',
    at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT booking_events_pkey PRIMARY KEY (show_id, event_id),
    CONSTRAINT booking_events_show_fkey FOREIGN KEY (show_id) REFERENCES shows (show_id),
    CONSTRAINT booking_events_kind_valid CHECK (kind IN (
        'confirmed', 'cancelled', 'refused_stale', 'refused_taken', 'refused_lost', 'counter_repaired', 'marker_repaired')),
    CONSTRAINT booking_events_generation_nonnegative CHECK (generation >= 0),
    CONSTRAINT booking_events_seat_ids_nonempty CHECK (cardinality(seat_ids) > 0),
    CONSTRAINT booking_events_booking_required CHECK (booking_id IS NOT NULL OR kind NOT IN ('confirmed', 'cancelled'))
);

-- +goose StatementBegin
CREATE FUNCTION booking_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'booking_events is append-only' USING ERRCODE = 'restrict_violation';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER booking_events_append_only
    BEFORE UPDATE OR DELETE ON booking_events
    FOR EACH ROW EXECUTE FUNCTION booking_events_append_only();

-- booking_details is a booking with its seats, as the engine reads it.
CREATE VIEW booking_details AS
SELECT b.show_id, b.booking_id, b.generation, b.holder_id, b.fingerprint, b.status,
       b.confirmed_at, b.cancelled_at,
       ARRAY(SELECT bs.seat_id FROM booking_seats bs
             WHERE bs.show_id = b.show_id AND bs.booking_id = b.booking_id
             ORDER BY bs.seat_id)::text[] AS seat_ids
FROM bookings b;

-- +goose Down
DROP VIEW booking_details;
DROP TABLE booking_events;
DROP FUNCTION booking_events_append_only();
DROP TABLE seat_claims;
DROP TABLE booking_seats;
DROP TABLE bookings;
DROP TABLE seat_fences;
DROP TABLE seats;
DROP TABLE shows;
