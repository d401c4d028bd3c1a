-- name: BackendTerminate :one
-- BackendTerminate ends a server process of this role. After a COMMIT whose reply was
-- lost, the engine ends the process that ran it, so that the transaction's outcome is
-- final before the engine looks it up.
SELECT pg_catalog.pg_terminate_backend(@pid::int) AS terminated;

-- name: BackendAlive :one
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE pid = @pid::int) AS alive;
