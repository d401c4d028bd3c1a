-- name: EventsAfter :many
-- EventsAfter reads the feed (migration 00010): the booking changes and the hold moves
-- (migration 00022) after the position (@after_txid, @after_event), in (txid, event_id)
-- order, of transactions below the oldest one of this database still running only
-- (booking_events_horizon, migration 00016), so that no row can commit later behind
-- what it returns. An event of a booking carries its booking's confirmation time.
SELECT e.show_id, e.event_id, CAST(CAST(e.txid AS text) AS bigint) AS txid, e.kind, e.booking_id, e.generation,
       e.seat_ids, e.holder_id, e.at, b.confirmed_at AS booking_confirmed_at, e.from_holder_id, e.expires_at
FROM booking_events e
LEFT JOIN bookings b ON b.show_id = e.show_id AND b.booking_id = e.booking_id
WHERE e.kind IN ('confirmed', 'cancelled', 'seats_cancelled', 'exchanged', 'transferred', 'lost', 'hold_reclaimed', 'hold_transferred')
  AND (e.txid, e.event_id) > (CAST(CAST(@after_txid::bigint AS text) AS xid8), @after_event::bigint)
  AND e.txid < (SELECT booking_events_horizon())
ORDER BY e.txid, e.event_id
LIMIT @max_rows::int;

-- name: MovesRelayLock :exec
-- MovesRelayLock serializes the relays of a show's hold moves (engine/moves.go) until
-- the transaction ends. It is taken before the relay writes, so the relays' transaction
-- ids (drawn at the first write) follow the order they took the lock in. The lock's
-- first key, 1752132708, is "hold" in ASCII.
SELECT pg_advisory_xact_lock(1752132708, hashtext(@show_id::text));

-- name: HoldEventInsertMany :execrows
-- HoldEventInsertMany writes hold moves' events in the order given, each once: a move
-- whose event is in the feed already (another relay wrote it) is skipped. A move's
-- seats and place keys are one space-separated string (neither has a space).
INSERT INTO booking_events (show_id, kind, generation, seat_ids, holder_id, from_holder_id, expires_at, move_id)
SELECT @show_id, m.kind, m.generation, string_to_array(m.seats, ' '), m.holder_id, m.from_holder_id, m.expires_at, m.move_id
FROM (SELECT unnest(@kinds::text[]) AS kind, unnest(@generations::bigint[]) AS generation, unnest(@seats::text[]) AS seats,
             unnest(@holder_ids::text[]) AS holder_id, unnest(@from_holder_ids::text[]) AS from_holder_id,
             unnest(@expires_at::timestamptz[]) AS expires_at, unnest(@move_ids::text[]) AS move_id,
             generate_series(1, cardinality(@kinds::text[])) AS i) AS m
ORDER BY m.i
ON CONFLICT (show_id, move_id) WHERE move_id IS NOT NULL DO NOTHING;

-- name: EventLostInsert :execrows
-- EventLostInsert records a booking a failover lost (Reconcile), once per booking: a
-- second reconciliation that finds it again writes nothing.
INSERT INTO booking_events (show_id, booking_id, kind, generation, seat_ids)
VALUES (@show_id, sqlc.narg(booking_id), 'lost', @generation::bigint, @seat_ids::text[])
ON CONFLICT (show_id, generation) WHERE kind = 'lost' DO NOTHING;

-- name: WebhookLease :one
-- WebhookLease takes or renews the lease of an endpoint's deliveries for @holder, for
-- @seconds by the database's clock, when @holder has it or it has run out, and returns
-- the endpoint's delivery cursor. No row: another engine holds the lease.
INSERT INTO webhook_deliveries (endpoint, holder, lease_until)
VALUES (@endpoint, @holder, now() + make_interval(secs => @seconds::float8))
ON CONFLICT (endpoint) DO UPDATE
    SET holder = EXCLUDED.holder, lease_until = EXCLUDED.lease_until, updated_at = now()
    WHERE webhook_deliveries.holder = EXCLUDED.holder OR webhook_deliveries.lease_until < now()
RETURNING delivered;

-- name: WebhookAdvance :execrows
-- WebhookAdvance moves an endpoint's delivery cursor, only while @holder's lease runs.
UPDATE webhook_deliveries SET delivered = @delivered, updated_at = now()
WHERE endpoint = @endpoint AND holder = @holder AND lease_until > now();

-- name: WebhookRelease :exec
-- WebhookRelease gives up @holder's lease, so that another engine takes over at once.
UPDATE webhook_deliveries SET lease_until = '-infinity', updated_at = now()
WHERE endpoint = @endpoint AND holder = @holder;

-- name: WebhookCursor :one
-- WebhookCursor reads an endpoint's delivery cursor ('' before its first delivery).
SELECT COALESCE((SELECT delivered FROM webhook_deliveries WHERE endpoint = @endpoint), '')::text AS delivered;
