-- seat_claims_fence_fkey (a claim's seat has a fence) is checked once per statement
-- instead of once per claimed seat. As a foreign key it ran a lookup of the fence per
-- inserted claim and locked it (FOR KEY SHARE): a lock record in the WAL for every sold
-- seat, on a fence the confirmation had just locked FOR UPDATE and advanced. The claims'
-- statement trigger (seat_claims_check_all) reads every new claim's fence already, to
-- compare the generations: it now refuses a claim with no fence under the foreign key's
-- name, and a row trigger on seat_fences refuses, under the same name, what the key
-- refused there: deleting a claimed seat's fence, or changing its key.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION seat_claims_check_all() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    bad record;
BEGIN
    SELECT n.show_id, n.seat_id, n.generation, f.generation AS fence, f.seat_id IS NULL AS missing INTO bad
    FROM new_claims n
    LEFT JOIN seat_fences f ON f.show_id = n.show_id AND f.seat_id = n.seat_id
    WHERE f.generation IS DISTINCT FROM n.generation
    ORDER BY f.seat_id IS NULL DESC
    LIMIT 1;
    IF FOUND AND bad.missing THEN
        RAISE EXCEPTION 'seat_claims: claim of %/%, a seat with no fence', bad.show_id, bad.seat_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'seat_claims_fence_fkey';
    END IF;
    IF FOUND THEN
        RAISE EXCEPTION 'seat_claims: claim of %/% with generation % but the seat''s fence is %',
            bad.show_id, bad.seat_id, bad.generation, bad.fence
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'seat_claims_at_fence';
    END IF;
    SELECT n.show_id, n.seat_id, n.booking_id INTO bad
    FROM new_claims n
    WHERE NOT EXISTS (SELECT 1 FROM booking_seats s
                      WHERE s.show_id = n.show_id AND s.booking_id = n.booking_id AND s.seat_id = n.seat_id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'seat_claims: claim of %/% names booking %, which does not have that seat', bad.show_id, bad.seat_id, bad.booking_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'seat_claims_booking_seat_fkey';
    END IF;
    SELECT n.show_id, n.seat_id, n.booking_id, n.generation INTO bad
    FROM new_claims n
    WHERE NOT EXISTS (SELECT 1 FROM bookings b
                      WHERE b.show_id = n.show_id AND b.booking_id = n.booking_id
                        AND b.generation = n.generation AND b.status = n.booking_status)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'seat_claims: claim of %/% names no confirmed booking % of generation %', bad.show_id, bad.seat_id, bad.booking_id, bad.generation
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'seat_claims_booking_fkey';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- A claimed seat's fence is neither deleted nor given another key.
-- +goose StatementBegin
CREATE FUNCTION seat_fences_keep_claimed() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM seat_claims c WHERE c.show_id = OLD.show_id AND c.seat_id = OLD.seat_id) THEN
        RAISE EXCEPTION 'seat_fences: the fence of %/% has a claim', OLD.show_id, OLD.seat_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'seat_claims_fence_fkey';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER seat_fences_keep_claimed
    BEFORE DELETE OR UPDATE OF show_id, seat_id ON seat_fences
    FOR EACH ROW EXECUTE FUNCTION seat_fences_keep_claimed();
ALTER TABLE seat_claims DROP CONSTRAINT seat_claims_fence_fkey;

-- +goose Down
ALTER TABLE seat_claims ADD CONSTRAINT seat_claims_fence_fkey FOREIGN KEY (show_id, seat_id) REFERENCES seat_fences (show_id, seat_id);
DROP TRIGGER seat_fences_keep_claimed ON seat_fences;
DROP FUNCTION seat_fences_keep_claimed();
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION seat_claims_check_all() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    bad record;
BEGIN
    SELECT n.show_id, n.seat_id, n.generation, f.generation AS fence INTO bad
    FROM new_claims n
    LEFT JOIN seat_fences f ON f.show_id = n.show_id AND f.seat_id = n.seat_id
    WHERE f.generation IS DISTINCT FROM n.generation
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'seat_claims: claim of %/% with generation % but the seat''s fence is %',
            bad.show_id, bad.seat_id, bad.generation, bad.fence
            USING ERRCODE = 'integrity_constraint_violation', CONSTRAINT = 'seat_claims_at_fence';
    END IF;
    SELECT n.show_id, n.seat_id, n.booking_id INTO bad
    FROM new_claims n
    WHERE NOT EXISTS (SELECT 1 FROM booking_seats s
                      WHERE s.show_id = n.show_id AND s.booking_id = n.booking_id AND s.seat_id = n.seat_id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'seat_claims: claim of %/% names booking %, which does not have that seat', bad.show_id, bad.seat_id, bad.booking_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'seat_claims_booking_seat_fkey';
    END IF;
    SELECT n.show_id, n.seat_id, n.booking_id, n.generation INTO bad
    FROM new_claims n
    WHERE NOT EXISTS (SELECT 1 FROM bookings b
                      WHERE b.show_id = n.show_id AND b.booking_id = n.booking_id
                        AND b.generation = n.generation AND b.status = n.booking_status)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'seat_claims: claim of %/% names no confirmed booking % of generation %', bad.show_id, bad.seat_id, bad.booking_id, bad.generation
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'seat_claims_booking_fkey';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
