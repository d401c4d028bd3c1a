#!/usr/bin/env bash
# services.sh — a PostgreSQL cluster and a Redis for this checkout, on loopback.
#
#   services.sh start   install what is missing, start both (idempotent), wait until
#                       they answer, print DATABASE_URL= and REDIS_URL= on stdout
#   services.sh stop    stop exactly the processes "start" started (by pid file)
#   services.sh status  say what runs
#   services.sh reset   stop both and delete their data: a clean local state
#   services.sh deploy-tools  install promtool (prometheus) and buildah when missing
#   services.sh cluster start a three-master Redis Cluster too, print REDIS_CLUSTER_URL=
#   services.sh stress [N] install stress-ng when missing and run N (2) CPU-bound workers
#                       until killed: the load make test-busy runs the tests beside
#   services.sh browser install Chromium when missing (the seat-map page's browser test
#                       drives it headless), print HOLDFAST_CHROMIUM=
#
# When DATABASE_URL and REDIS_URL are both set, "start" only prints them: the caller
# brings its own services. Progress goes to stderr so that stdout can be eval'ed.
#
# Ports: HOLDFAST_PG_PORT (25432) and HOLDFAST_REDIS_PORT (26379), below the kernel's
# ephemeral range (32768-60999) so no outgoing connection takes them, and chosen so they never
# collide with a system PostgreSQL on 5432 or Redis on 6379. Data lives under
# HOLDFAST_SERVICES_DIR (default: .local/ in the checkout, git-ignored). PostgreSQL
# refuses to run as root, so when invoked as root it runs as the "postgres" user.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PG_PORT="${HOLDFAST_PG_PORT:-25432}"
REDIS_PORT="${HOLDFAST_REDIS_PORT:-26379}"
DIR="${HOLDFAST_SERVICES_DIR:-$ROOT/.local}"

# shellcheck source=lib.sh
source "$ROOT/internal/services/lib.sh"


# pg_alive: our cluster's postmaster is alive, on whatever port (a stale postmaster.pid
# whose pid was reused by another process does not count).
pg_alive() {
	local bin="$1"
	[ -f "$DIR/pg/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$DIR/pg" status >/dev/null 2>&1
}

# pg_port: the port our cluster's postmaster listens on (line 4 of postmaster.pid).
pg_port() { sed -n 4p "$DIR/pg/postmaster.pid" 2>/dev/null; }

# pg_running: our cluster's postmaster is alive, listens on our port and answers there
# (not another server that answers on that port while ours runs on another).
pg_running() {
	local bin="$1"
	pg_alive "$bin" && [ "$(pg_port)" = "$PG_PORT" ] && "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"
}

start_pg() {
	local bin
	bin="$(pg_bindir)"
	if pg_running "$bin"; then
		log "postgresql already running on 127.0.0.1:$PG_PORT"
	else
		if pg_alive "$bin"; then
			die "this checkout's PostgreSQL ($DIR/pg) runs on port $(pg_port), not $PG_PORT;" \
				"use that port (HOLDFAST_PG_PORT=$(pg_port) make ...) or stop it first (HOLDFAST_PG_PORT=$(pg_port) make stop)"
		fi
		if "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then
			die "port $PG_PORT answers as a PostgreSQL that is not this checkout's ($DIR/pg);" \
				"pick another port (HOLDFAST_PG_PORT=25433 make ...) or use that server (DATABASE_URL=postgres://...)"
		fi
		if [ ! -f "$DIR/pg/PG_VERSION" ]; then
			log "initdb in $DIR/pg"
			mkdir -p "$DIR/pg"
			if is_root; then chown postgres: "$DIR/pg"; fi
			as_pg "$bin/initdb" -D "$DIR/pg" -U holdfast -A trust -E UTF8 --no-locale >/dev/null
		fi
		if is_root; then
			touch "$DIR/pg.log" && chown postgres: "$DIR/pg.log"
		fi
		log "starting postgresql on 127.0.0.1:$PG_PORT"
		as_pg "$bin/pg_ctl" -D "$DIR/pg" -l "$DIR/pg.log" -w -t 60 \
			-o "-c listen_addresses=127.0.0.1 -c port=$PG_PORT -c unix_socket_directories='' -c max_connections=300 -c shared_buffers=256MB" \
			start >/dev/null || { tail -20 "$DIR/pg.log" >&2; die "postgresql did not start"; }
	fi
	local i
	for i in $(seq 1 60); do
		if "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then break; fi
		sleep 0.5
	done
	"$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" || die "postgresql does not answer on 127.0.0.1:$PG_PORT"
	if ! "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U holdfast -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='holdfast'" | grep -q 1; then
		"$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U holdfast -d postgres -qc "CREATE DATABASE holdfast" >/dev/null
	fi
}

# answers PORT: something answers PING there.
answers() { redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG; }

# ours PORT PIDFILE: the Redis on PORT is the process our pid file names.
ours() {
	local pid
	[ -f "$2" ] && pid="$(cat "$2")" && [ -n "$pid" ] &&
		[ "$(redis-cli -h 127.0.0.1 -p "$1" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p')" = "$pid" ]
}

# claim PORT PIDFILE VAR: fail, saying what to do, when PORT answers but is not ours.
claim() {
	if answers "$1" && ! ours "$1" "$2"; then
		die "port $1 answers as a Redis that is not this checkout's (no matching $2);" \
			"pick another port ($3=$(($1 + 1)) make ...) or use that server (REDIS_URL=redis://127.0.0.1:$1/0)"
	fi
}

redis_running() { answers "$REDIS_PORT" && ours "$REDIS_PORT" "$DIR/redis.pid"; }

start_redis() {
	claim "$REDIS_PORT" "$DIR/redis.pid" HOLDFAST_REDIS_PORT
	if redis_running; then
		log "redis already running on 127.0.0.1:$REDIS_PORT"
	else
		mkdir -p "$DIR/redis"
		log "starting redis on 127.0.0.1:$REDIS_PORT"
		redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --daemonize yes \
			--pidfile "$DIR/redis.pid" --logfile "$DIR/redis.log" --dir "$DIR/redis" \
			--save '' --appendonly no --maxmemory-policy noeviction --maxclients 10000 \
			--protected-mode yes >&2
	fi
	local i
	for i in $(seq 1 60); do
		if redis_running; then break; fi
		sleep 0.25
	done
	redis_running || { tail -20 "$DIR/redis.log" >&2 2>/dev/null; die "redis does not answer on 127.0.0.1:$REDIS_PORT"; }
}

# A three-master Redis Cluster on loopback, for `make test-cluster`: ports
# HOLDFAST_CLUSTER_PORT .. +2 (27001..27003), cluster bus ports +100.
CLUSTER_PORT="${HOLDFAST_CLUSTER_PORT:-27001}"

cluster_ports() { echo "$CLUSTER_PORT" "$((CLUSTER_PORT + 1))" "$((CLUSTER_PORT + 2))"; }

start_cluster() {
	local p addrs=""
	for p in $(cluster_ports); do
		addrs="$addrs 127.0.0.1:$p"
		claim "$p" "$DIR/cluster-$p.pid" HOLDFAST_CLUSTER_PORT
		if answers "$p"; then
			continue
		fi
		mkdir -p "$DIR/cluster-$p"
		log "starting redis cluster node on 127.0.0.1:$p"
		redis-server --bind 127.0.0.1 --port "$p" --cluster-enabled yes --cluster-config-file nodes.conf \
			--cluster-port "$((p + 100))" --cluster-node-timeout 2000 --daemonize yes \
			--pidfile "$DIR/cluster-$p.pid" --logfile "$DIR/cluster-$p.log" --dir "$DIR/cluster-$p" \
			--save '' --appendonly no --maxmemory-policy noeviction >&2
	done
	for p in $(cluster_ports); do
		for _ in $(seq 1 40); do
			redis-cli -h 127.0.0.1 -p "$p" ping 2>/dev/null | grep -q PONG && break
			sleep 0.25
		done
	done
	if ! redis-cli -h 127.0.0.1 -p "$CLUSTER_PORT" cluster info 2>/dev/null | grep -q "cluster_slots_assigned:16384"; then
		log "creating the cluster"
		# shellcheck disable=SC2086
		redis-cli --cluster create $addrs --cluster-replicas 0 --cluster-yes >&2
	fi
	for p in $(cluster_ports); do
		for _ in $(seq 1 120); do
			redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q "cluster_state:ok" && break
			sleep 0.25
		done
		redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q "cluster_state:ok" || die "redis cluster node $p is not ok"
	done
	echo "REDIS_CLUSTER_URL=$(echo $addrs | tr ' ' ',')"
}

stop_all() {
	pick_dir
	local bin
	if [ -f "$DIR/redis.pid" ]; then
		local pid
		pid="$(cat "$DIR/redis.pid")"
		if kill -0 "$pid" 2>/dev/null; then
			log "stopping redis (pid $pid)"
			kill "$pid"
			for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
		fi
		rm -f "$DIR/redis.pid"
	fi
	local p
	for p in $(cluster_ports); do
		if [ -f "$DIR/cluster-$p.pid" ]; then
			kill "$(cat "$DIR/cluster-$p.pid")" 2>/dev/null || true
			rm -f "$DIR/cluster-$p.pid"
		fi
	done
	if bin="$(pg_bindir)" && pg_alive "$bin"; then
		log "stopping postgresql"
		as_pg "$bin/pg_ctl" -D "$DIR/pg" -m fast -w stop >/dev/null
	fi
}

case "${1:-start}" in
start)
	if [ -n "${DATABASE_URL:-}" ] && [ -n "${REDIS_URL:-}" ]; then
		log "DATABASE_URL and REDIS_URL are set; starting nothing"
	else
		ensure_packages
		pick_dir
		if [ -z "${DATABASE_URL:-}" ]; then start_pg; else log "DATABASE_URL is set; not starting postgresql"; fi
		if [ -z "${REDIS_URL:-}" ]; then start_redis; else log "REDIS_URL is set; not starting redis"; fi
	fi
	echo "DATABASE_URL=${DATABASE_URL:-postgres://holdfast@127.0.0.1:$PG_PORT/holdfast?sslmode=disable}"
	echo "REDIS_URL=${REDIS_URL:-redis://127.0.0.1:$REDIS_PORT/0}"
	;;
cluster)
	ensure_packages
	pick_dir
	start_cluster
	;;
browser)
	for b in chromium chromium-browser google-chrome; do
		if command -v "$b" >/dev/null; then
			echo "HOLDFAST_CHROMIUM=$(command -v "$b")"
			exit 0
		fi
	done
	if is_root && command -v apt-get >/dev/null; then
		apt_install chromium
		echo "HOLDFAST_CHROMIUM=$(command -v chromium)"
	else
		log "no Chromium and cannot install it (not root, or no apt-get): the browser test of the seat-map page will skip (fail under CI=true); apt-get install chromium"
	fi
	;;
stress)
	# A CPU load beside the tests: NCPU busy workers until killed (make test-busy).
	if ! command -v stress-ng >/dev/null; then
		apt_install stress-ng
	fi
	exec stress-ng --cpu "${2:-2}" --quiet
	;;
deploy-tools)
	# What make check-deploy needs: promtool (Debian's prometheus) and buildah.
	missing=()
	command -v promtool >/dev/null || missing+=(prometheus)
	command -v buildah >/dev/null || missing+=(buildah)
	command -v curl >/dev/null || missing+=(curl)
	[ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
	if [ "${#missing[@]}" -gt 0 ]; then
		pick_dir
		apt_install "${missing[@]}"
	fi
	;;
stop)
	stop_all
	;;
reset)
	# A clean local state: stop both, then delete their data (every show and booking
	# of this checkout); the next start makes new ones.
	stop_all
	pick_dir
	rm -rf "$DIR/pg" "$DIR/redis" "$DIR"/cluster-* "$DIR/pg.log" "$DIR/redis.log" "$DIR/redis.pid"
	log "deleted the PostgreSQL and Redis data under $DIR"
	;;
status)
	pick_dir
	if bin="$(pg_bindir)" && pg_running "$bin"; then
		echo "postgresql: running on 127.0.0.1:$PG_PORT"
	elif [ -n "${bin:-}" ] && pg_alive "$bin"; then
		echo "postgresql: this checkout's runs on 127.0.0.1:$(pg_port), not $PG_PORT"
	elif [ -n "${bin:-}" ] && "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then
		echo "postgresql: port $PG_PORT is taken by a PostgreSQL that is not this checkout's"
	else
		echo "postgresql: stopped"
	fi
	if command -v redis-cli >/dev/null && redis_running; then
		echo "redis: running on 127.0.0.1:$REDIS_PORT"
	elif command -v redis-cli >/dev/null && answers "$REDIS_PORT"; then
		echo "redis: port $REDIS_PORT is taken by a Redis that is not this checkout's"
	else
		echo "redis: stopped"
	fi
	;;
*)
	die "usage: services.sh start|stop|reset|status|cluster|browser|stress|deploy-tools"
	;;
esac
