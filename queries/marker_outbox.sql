-- name: MarkerOutboxInsert :one
-- MarkerOutboxInsert records, inside a cancellation's transaction, the marker write it
-- owes Redis.
INSERT INTO marker_outbox (show_id, generation, sold, seat_ids)
VALUES (@show_id, @generation::bigint, @sold, @seat_ids::text[])
RETURNING seq;

-- name: MarkerOutboxAnyDue :one
-- MarkerOutboxAnyDue says whether a row has waited at least @min_age_seconds: the repair
-- opens a transaction only when there is something to take.
SELECT EXISTS (
    SELECT 1 FROM marker_outbox
    WHERE created_at < now() - make_interval(secs => @min_age_seconds::float8)
) AS due;

-- name: MarkerOutboxClaimDue :many
-- MarkerOutboxClaimDue takes the oldest rows that have waited at least @min_age_seconds
-- and that no other engine has taken: it locks them until the transaction ends, so that
-- engines repairing at once split the rows instead of all writing the same ones.
SELECT show_id, seq, generation, sold, seat_ids
FROM marker_outbox
WHERE created_at < now() - make_interval(secs => @min_age_seconds::float8)
ORDER BY created_at
LIMIT @max_rows::int
FOR UPDATE SKIP LOCKED;

-- name: MarkerOutboxDelete :execrows
-- MarkerOutboxDelete drops rows whose marker writes Redis has.
DELETE FROM marker_outbox
WHERE (show_id, seq) IN (SELECT unnest(@show_ids::text[]), unnest(@seqs::bigint[]));

-- name: MarkerOutboxPending :one
-- MarkerOutboxPending counts the rows not yet applied, and the age of the oldest.
SELECT count(*)::bigint AS pending,
       COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 AS oldest_seconds
FROM marker_outbox;
