-- The event feed (queries/events.sql) hands out events of transactions below a horizon:
-- every transaction that could still commit a row of booking_events behind it has ended.
-- That horizon was the oldest transaction still running in the whole cluster (the
-- reader's snapshot's xmin), so one long transaction in another database of the same
-- server held every consumer back until it ended. booking_events_horizon() leaves out
-- the transactions that pg_stat_activity shows running in another database: they
-- cannot write this database's rows. A transaction it cannot place (another role's
-- session, its xid hidden without pg_read_all_stats; a prepared transaction) still
-- holds the horizon, as before. STABLE: it reads the calling statement's snapshot, so
-- the horizon and the rows the statement sees are of one moment.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION booking_events_horizon() RETURNS xid8
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(
        (SELECT min(x) FROM pg_catalog.pg_snapshot_xip(s) AS x
         WHERE CAST(x AS xid) NOT IN (
             SELECT a.backend_xid FROM pg_catalog.pg_stat_activity AS a
             WHERE a.backend_xid IS NOT NULL AND a.datname IS DISTINCT FROM pg_catalog.current_database())),
        pg_catalog.pg_snapshot_xmax(s))
    FROM pg_catalog.pg_current_snapshot() AS s
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION booking_events_horizon();
