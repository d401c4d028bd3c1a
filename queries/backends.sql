-- name: ServerIdentity :one
-- ServerIdentity names the server a connection reaches: its cluster (system
-- identifier), its timeline (0 on a standby) and when its postmaster started. A COMMIT
-- whose reply was lost is settled only on the server that ran it: after a failover or a
-- restart, its backend pid means nothing there.
SELECT (SELECT c.system_identifier FROM pg_catalog.pg_control_system() c)::bigint AS system_identifier,
       (CASE WHEN pg_catalog.pg_is_in_recovery() THEN 0
             ELSE ('x' || substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))::bit(32)::int
        END)::int AS timeline,
       pg_catalog.pg_postmaster_start_time()::timestamptz AS postmaster_start,
       pg_catalog.pg_backend_pid()::int AS pid,
       (SELECT a.backend_start FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid())::timestamptz AS backend_start;

-- name: BackendState :one
-- BackendState says whether the backend (pid, started at backend_start) still runs, and
-- whether it waits for a synchronous standby: a COMMIT there is written locally and
-- not yet replicated, and must not be ended.
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
               WHERE a.pid = @pid::int AND a.backend_start = @backend_start::timestamptz) AS alive,
       EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
               WHERE a.pid = @pid::int AND a.backend_start = @backend_start::timestamptz
                 AND a.wait_event_type = 'IPC' AND a.wait_event = 'SyncRep') AS sync_rep;

-- name: BackendTerminate :one
-- BackendTerminate ends the server process (pid, started at backend_start) of this
-- role. After a COMMIT whose reply was lost, the engine ends the process that ran it,
-- so that the transaction's outcome is final before the engine looks it up.
SELECT COALESCE((SELECT pg_catalog.pg_terminate_backend(a.pid) FROM pg_catalog.pg_stat_activity a
                 WHERE a.pid = @pid::int AND a.backend_start = @backend_start::timestamptz), false)::boolean AS terminated;

-- name: DurabilityBarrier :execrows
-- DurabilityBarrier writes a row (see migration 00005), so that its transaction's COMMIT
-- writes WAL and waits, as every such COMMIT does, for the synchronous standbys the
-- server is set up with: once it returns, everything the server committed before it is
-- as durable as its settings promise.
UPDATE commit_barrier SET writes = writes + 1 WHERE slot = @slot::int;
