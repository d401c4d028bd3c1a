-- The invariants the engine keeps, stated in the schema so that no SQL session can break
-- them either (a review found PostgreSQL accepting each of these from psql):
--   * one hold makes at most one booking, ever (bookings.hold_hash, unique per show);
--   * a fence never goes down;
--   * a claim carries its booking's generation, equal to its seat's fence, and only a
--     confirmed booking has claims;
--   * a confirmed booking claims every one of its seats (checked at COMMIT);
--   * claims are never rewritten in place, and the event log cannot be truncated.
-- It also adds marker_outbox: the sold-marker writes a booking or a cancellation owes
-- Redis, recorded in the same transaction and deleted once Redis has them.
-- Existing rows are checked: the migration fails, naming the broken rule, on a database
-- that already violates one.

-- +goose Up

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM seat_claims c JOIN seat_fences f USING (show_id, seat_id)
               WHERE c.generation <> f.generation) THEN
        RAISE EXCEPTION 'existing rows break an invariant: a claim whose generation is not its seat''s fence';
    END IF;
    IF EXISTS (SELECT 1 FROM seat_claims c JOIN bookings b USING (show_id, booking_id)
               WHERE c.generation <> b.generation OR b.status <> 'confirmed') THEN
        RAISE EXCEPTION 'existing rows break an invariant: a claim that differs from its booking, or of a cancelled booking';
    END IF;
    IF EXISTS (SELECT 1 FROM booking_seats s JOIN bookings b USING (show_id, booking_id)
               LEFT JOIN seat_claims c ON c.show_id = s.show_id AND c.seat_id = s.seat_id AND c.booking_id = s.booking_id
               WHERE b.status = 'confirmed' AND c.seat_id IS NULL) THEN
        RAISE EXCEPTION 'existing rows break an invariant: a confirmed booking without the claim of one of its seats';
    END IF;
END;
$$;
-- +goose StatementEnd

-- One hold, one booking. hold_hash is SHA-256 over the show and the hold's token (never
-- the token itself). Rows from before this migration get their request fingerprint,
-- which no new hold hash can equal (different inputs, domain-separated).
ALTER TABLE bookings ADD COLUMN hold_hash bytea;
UPDATE bookings SET hold_hash = fingerprint;
ALTER TABLE bookings ALTER COLUMN hold_hash SET NOT NULL;
ALTER TABLE bookings ADD CONSTRAINT bookings_hold_hash_sha256 CHECK (length(hold_hash) = 32);
ALTER TABLE bookings ADD CONSTRAINT bookings_hold_unique UNIQUE (show_id, hold_hash);
-- The spent-hold check of 00002 now looks bookings up by hold_hash.
DROP INDEX bookings_fingerprint_idx;

-- A claim names its booking with the booking's generation and status, so the database
-- refuses a claim whose generation differs from its booking's, a claim of a cancelled
-- booking, and cancelling a booking that still has claims (ON UPDATE NO ACTION).
ALTER TABLE bookings ADD CONSTRAINT bookings_claim_key UNIQUE (show_id, booking_id, generation, status);
ALTER TABLE seat_claims ADD COLUMN booking_status text NOT NULL DEFAULT 'confirmed';
ALTER TABLE seat_claims ADD CONSTRAINT seat_claims_booking_confirmed CHECK (booking_status = 'confirmed');
ALTER TABLE seat_claims ADD CONSTRAINT seat_claims_booking_fkey
    FOREIGN KEY (show_id, booking_id, generation, booking_status)
    REFERENCES bookings (show_id, booking_id, generation, status);

-- +goose StatementBegin
CREATE FUNCTION holdfast_refuse() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = TG_NAME;
END;
$$;
-- +goose StatementEnd

-- A fence only ever grows.
CREATE TRIGGER seat_fences_never_lowered
    BEFORE UPDATE ON seat_fences
    FOR EACH ROW WHEN (NEW.generation < OLD.generation)
    EXECUTE FUNCTION holdfast_refuse('seat_fences: a fence never goes down');
CREATE TRIGGER seat_fences_no_truncate
    BEFORE TRUNCATE ON seat_fences
    FOR EACH STATEMENT EXECUTE FUNCTION holdfast_refuse('seat_fences cannot be truncated');

-- booking_events was append-only for UPDATE and DELETE; TRUNCATE too now.
CREATE TRIGGER booking_events_no_truncate
    BEFORE TRUNCATE ON booking_events
    FOR EACH STATEMENT EXECUTE FUNCTION holdfast_refuse('booking_events is append-only');

-- Claims are inserted and deleted, never rewritten.
CREATE TRIGGER seat_claims_immutable
    BEFORE UPDATE ON seat_claims
    FOR EACH ROW EXECUTE FUNCTION holdfast_refuse('seat_claims are never updated: delete and claim again');

-- A new claim carries the generation its seat's fence accepted (the confirmation
-- advanced the fence to it in the same transaction).
-- +goose StatementBegin
CREATE FUNCTION seat_claims_at_fence() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    fence bigint;
BEGIN
    SELECT generation INTO fence FROM seat_fences WHERE show_id = NEW.show_id AND seat_id = NEW.seat_id;
    IF fence <> NEW.generation THEN -- no fence row: the foreign key refuses the claim
        RAISE EXCEPTION 'seat_claims: claim of %/% with generation % but the seat''s fence is %',
            NEW.show_id, NEW.seat_id, NEW.generation, fence
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'seat_claims_at_fence';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER seat_claims_at_fence
    BEFORE INSERT ON seat_claims
    FOR EACH ROW EXECUTE FUNCTION seat_claims_at_fence();

-- A confirmed booking claims every one of its seats, checked when the transaction
-- commits (the booking, its seats and its claims are written in one statement; a
-- cancellation deletes the claims before it marks the booking).
-- +goose StatementBegin
CREATE FUNCTION bookings_claims_whole() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    sid text;
    bid uuid;
    st text;
    missing int;
BEGIN
    IF TG_OP = 'DELETE' THEN
        sid := OLD.show_id; bid := OLD.booking_id;
    ELSE
        sid := NEW.show_id; bid := NEW.booking_id;
    END IF;
    SELECT status INTO st FROM bookings WHERE show_id = sid AND booking_id = bid;
    IF st IS DISTINCT FROM 'confirmed' THEN
        RETURN NULL; -- cancelled (the foreign key keeps its claims away) or gone
    END IF;
    SELECT count(*) INTO missing FROM booking_seats s
    WHERE s.show_id = sid AND s.booking_id = bid
      AND NOT EXISTS (SELECT 1 FROM seat_claims c
                      WHERE c.show_id = s.show_id AND c.seat_id = s.seat_id AND c.booking_id = s.booking_id);
    IF missing > 0 OR NOT EXISTS (SELECT 1 FROM booking_seats s WHERE s.show_id = sid AND s.booking_id = bid) THEN
        RAISE EXCEPTION 'bookings: confirmed booking % of show % lacks the claims of % of its seats', bid, sid, missing
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'bookings_claims_whole';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE CONSTRAINT TRIGGER bookings_claims_whole
    AFTER INSERT OR UPDATE OF status ON bookings
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION bookings_claims_whole();
CREATE CONSTRAINT TRIGGER seat_claims_whole
    AFTER DELETE ON seat_claims
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION bookings_claims_whole();

-- marker_outbox: sold-marker writes owed to Redis. A confirmation inserts (sold) and a
-- cancellation inserts (not sold) in its own transaction; the engine applies the row
-- after COMMIT and deletes it, and every engine re-applies rows left behind (Redis down,
-- a process that died between COMMIT and the write) until Redis has them. Applying is
-- idempotent and ordered by generation inside Redis, so rows may be applied twice and
-- in any order.
CREATE TABLE marker_outbox (
    show_id    text        NOT NULL,
    seq        bigint      GENERATED ALWAYS AS IDENTITY,
    generation bigint      NOT NULL,
    sold       boolean     NOT NULL,
    seat_ids   text[]      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT marker_outbox_pkey PRIMARY KEY (show_id, seq),
    CONSTRAINT marker_outbox_show_fkey FOREIGN KEY (show_id) REFERENCES shows (show_id),
    CONSTRAINT marker_outbox_generation_positive CHECK (generation > 0),
    CONSTRAINT marker_outbox_seat_ids_nonempty CHECK (cardinality(seat_ids) > 0)
);
CREATE INDEX marker_outbox_created_idx ON marker_outbox (created_at);

-- +goose Down
DROP TABLE marker_outbox;
DROP TRIGGER seat_claims_whole ON seat_claims;
DROP TRIGGER bookings_claims_whole ON bookings;
DROP FUNCTION bookings_claims_whole();
DROP TRIGGER seat_claims_at_fence ON seat_claims;
DROP FUNCTION seat_claims_at_fence();
DROP TRIGGER seat_claims_immutable ON seat_claims;
DROP TRIGGER booking_events_no_truncate ON booking_events;
DROP TRIGGER seat_fences_no_truncate ON seat_fences;
DROP TRIGGER seat_fences_never_lowered ON seat_fences;
DROP FUNCTION holdfast_refuse();
ALTER TABLE seat_claims DROP CONSTRAINT seat_claims_booking_fkey;
ALTER TABLE seat_claims DROP COLUMN booking_status;
ALTER TABLE bookings DROP CONSTRAINT bookings_claim_key;
CREATE INDEX bookings_fingerprint_idx ON bookings (show_id, fingerprint);
ALTER TABLE bookings DROP CONSTRAINT bookings_hold_unique;
ALTER TABLE bookings DROP COLUMN hold_hash;
