#!/usr/bin/env bash
# ha.sh — a highly available holdfast on loopback, for make run-ha and its failovers:
#
#   PostgreSQL  a pg_auto_failover formation (Debian's postgresql-15-auto-failover): a
#               monitor and two nodes, a primary and a synchronous standby; the monitor
#               decides when to promote
#   Redis       a master, a replica and three Sentinels (Debian's redis-sentinel,
#               quorum 2)
#   holdfast    two `holdfast serve` replicas behind HAProxy (Debian's haproxy) on one
#               address, LISTEN_ADDR (127.0.0.1:8080), which make demo sells to
#
#   ha.sh start       install what is missing, start PostgreSQL and Redis (idempotent),
#                     print DATABASE_URL= and REDIS_URL= (the formation's URI, the
#                     Sentinel form) on stdout
#   ha.sh serve BIN [FLAGS]  start the serve replicas (BIN serve FLAGS, env as for
#                     make run) and HAProxy in front of them, wait until it answers
#   ha.sh env         print the URLs of the running set-up (fails when none runs)
#   ha.sh failover    ask the monitor for a failover (pg_autoctl perform failover)
#   ha.sh crash       kill -9 the primary node (its keeper and its PostgreSQL): the
#                     monitor finds it dead and promotes the standby (about 30 s)
#   ha.sh redis-failover   ask the Sentinels for a failover
#   ha.sh kill-replica N   kill -9 serve replica N (1 or 2): HAProxy sends its clients on
#   ha.sh status      the formation, the Redis master, the replicas
#   ha.sh stop        stop everything ha.sh started
#
# Ports from HOLDFAST_HA_PORT (28000): monitor +0, nodes +1 and +2, Redis master +379,
# replica +380, Sentinels +381..+383, serve replicas +81 and +82. Data under
# HOLDFAST_SERVICES_DIR/ha. Progress goes to stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="${HOLDFAST_SERVICES_DIR:-$ROOT/.local}"
BASE="${HOLDFAST_HA_PORT:-28000}"
LISTEN="${LISTEN_ADDR:-127.0.0.1:8080}"
MASTER=holdfast

# shellcheck source=lib.sh
source "$ROOT/internal/services/lib.sh"

ha_packages() {
	pg_bindir >/dev/null || apt_install postgresql
	command -v redis-server >/dev/null || apt_install redis-server
	command -v pg_autoctl >/dev/null || [ -x "$(pg_bindir)/pg_autoctl" ] || apt_install postgresql-15-auto-failover
	if ! command -v redis-sentinel >/dev/null; then
		apt_install redis-sentinel
		# Debian may start a Sentinel of its own on 26379: this set-up runs its own.
		service redis-sentinel stop >/dev/null 2>&1 || true
	fi
	if ! command -v haproxy >/dev/null; then
		apt_install haproxy
		service haproxy stop >/dev/null 2>&1 || true
	fi
}

# autoctl runs pg_autoctl as the PostgreSQL owner, its configuration under $HA.
autoctl() {
	as_pg env PATH="$(pg_bindir):$PATH" XDG_CONFIG_HOME="$HA/config" XDG_DATA_HOME="$HA/state" pg_autoctl "$@"
}

# keeper NAME starts `pg_autoctl run` for the node NAME in the background, once.
keeper() {
	local name="$1"
	if [ -f "$HA/$name.pid" ] && kill -0 "$(cat "$HA/$name.pid")" 2>/dev/null; then
		return
	fi
	as_pg env PATH="$(pg_bindir):$PATH" XDG_CONFIG_HOME="$HA/config" XDG_DATA_HOME="$HA/state" \
		setsid pg_autoctl run --pgdata "$HA/$name" >>"$HA/$name.log" 2>&1 &
	local pid=""
	for _ in $(seq 1 40); do
		pid="$(pgrep -o -f "^pg_autoctl run --pgdata $HA/$name\$" || true)"
		[ -n "$pid" ] && break
		sleep 0.25
	done
	[ -n "$pid" ] || die "pg_autoctl run for $name did not start; see $HA/$name.log"
	echo "$pid" >"$HA/$name.pid"
}

monitor_uri() {
	autoctl show uri --pgdata "$HA/monitor" --json | python3 -c \
		'import json,sys; print([r["uri"] for r in json.load(sys.stdin) if r["type"] == "monitor"][0])'
}

start_pg_ha() {
	if [ ! -f "$HA/monitor/PG_VERSION" ]; then
		log "creating the pg_auto_failover monitor on 127.0.0.1:$BASE"
		autoctl create monitor --pgdata "$HA/monitor" --pgport "$BASE" --hostname 127.0.0.1 \
			--auth trust --no-ssl >>"$HA/monitor.log" 2>&1 || { tail -20 "$HA/monitor.log" >&2; die "monitor"; }
	fi
	keeper monitor
	local i
	for i in $(seq 1 60); do "$(pg_bindir)/pg_isready" -q -h 127.0.0.1 -p "$BASE" && break; sleep 0.5; done
	local mon
	mon="$(monitor_uri)"
	for i in 1 2; do
		if [ ! -f "$HA/node$i/PG_VERSION" ]; then
			log "creating node$i on 127.0.0.1:$((BASE + i))"
			autoctl create postgres --pgdata "$HA/node$i" --pgport "$((BASE + i))" --hostname 127.0.0.1 \
				--name "node$i" --auth trust --no-ssl --monitor "$mon" --dbname holdfast --username holdfast \
				>>"$HA/node$i.log" 2>&1 || { tail -20 "$HA/node$i.log" >&2; die "node$i"; }
		fi
		keeper "node$i"
		# The second node joins once the first is primary.
		for _ in $(seq 1 120); do
			autoctl show state --pgdata "$HA/monitor" 2>/dev/null | grep -q "node$i .*| *\(primary\|secondary\|single\) *| *\(primary\|secondary\|single\)" && break
			sleep 0.5
		done
	done
	for _ in $(seq 1 120); do
		[ "$(autoctl show state --pgdata "$HA/monitor" 2>/dev/null | grep -c '| *\(primary\|secondary\) *| *\(primary\|secondary\)')" = 2 ] && break
		sleep 0.5
	done
	autoctl show state --pgdata "$HA/monitor" >&2
}

pid_alive() { [ -f "$HA/$1.pid" ] && kill -0 "$(cat "$HA/$1.pid")" 2>/dev/null; }

start_redis_ha() {
	local m=$((BASE + 379)) r=$((BASE + 380)) p name
	for p in $m $r; do
		name="redis-$p"
		pid_alive "$name" && continue
		local args=(--bind 127.0.0.1 --port "$p" --dir "$HA" --save "" --appendonly no
			--maxmemory-policy noeviction --daemonize yes --pidfile "$HA/$name.pid" --logfile "$HA/$name.log")
		if [ "$p" = "$r" ]; then args+=(--replicaof 127.0.0.1 "$m"); fi
		# A server that was promoted and restarted comes back as a replica of the master now.
		if [ "$p" = "$m" ] && [ -f "$HA/sentinel-$((BASE + 381)).conf" ]; then
			local now
			now="$(redis-cli -p $((BASE + 381)) sentinel get-master-addr-by-name "$MASTER" 2>/dev/null | tail -1 || true)"
			if [ -n "$now" ] && [ "$now" != "$p" ]; then args+=(--replicaof 127.0.0.1 "$now"); fi
		fi
		redis-server "${args[@]}"
	done
	for p in $((BASE + 381)) $((BASE + 382)) $((BASE + 383)); do
		name="sentinel-$p"
		pid_alive "$name" && continue
		if [ ! -f "$HA/$name.conf" ]; then
			printf 'port %s\nbind 127.0.0.1\nprotected-mode no\ndir %s\nsentinel monitor %s 127.0.0.1 %s 2\nsentinel down-after-milliseconds %s 2000\nsentinel failover-timeout %s 10000\n' \
				"$p" "$HA" "$MASTER" "$m" "$MASTER" "$MASTER" >"$HA/$name.conf"
		fi
		redis-sentinel "$HA/$name.conf" --daemonize yes --pidfile "$HA/$name.pid" --logfile "$HA/$name.log"
	done
	for _ in $(seq 1 40); do redis-cli -p $((BASE + 381)) ping 2>/dev/null | grep -q PONG && break; sleep 0.25; done
}

database_url() {
	local uri
	uri="$(autoctl show uri --pgdata "$HA/monitor" --formation default)"
	# The formation's URI names both nodes with target_session_attrs=read-write; the
	# role, and a connect timeout so that a dead node costs 2 s, are added here.
	echo "${uri/postgres:\/\//postgres://holdfast@}&connect_timeout=2" | sed 's/sslmode=prefer/sslmode=disable/'
}

redis_url() {
	echo "redis://127.0.0.1:$((BASE + 381))/0?master_name=$MASTER&addr=127.0.0.1:$((BASE + 382))&addr=127.0.0.1:$((BASE + 383))"
}

# backend NAME PATH is an HAProxy backend of the serve replicas, checked on PATH.
backend() {
	printf 'backend %s\n    balance roundrobin\n    option httpchk GET %s\n    http-check expect status 200\n    default-server inter 1s fall 2 rise 2\n' "$1" "$2"
	printf '    server serve1 127.0.0.1:%s check\n    server serve2 127.0.0.1:%s check\n' $((BASE + 81)) $((BASE + 82))
}

serve_replicas() {
	local bin="$1" i port
	shift
	for i in 1 2; do
		port=$((BASE + 80 + i))
		if [ -f "$HA/serve$i.pid" ] && kill -0 "$(cat "$HA/serve$i.pid")" 2>/dev/null; then continue; fi
		# HAProxy is the peer of every request: its X-Forwarded-For names the client.
		LISTEN_ADDR="127.0.0.1:$port" HOLDFAST_ADMIN_ADDR="127.0.0.1:$((BASE + 90 + i))" HOLDFAST_TRUSTED_PROXY=127.0.0.1/32 \
			setsid "$bin" serve "$@" >>"$HA/serve$i.log" 2>&1 &
		echo $! >"$HA/serve$i.pid"
	done
	cat >"$HA/haproxy.cfg" <<EOF
global
    maxconn 8192
defaults
    mode http
    timeout connect 2s
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h
    retries 2
    option redispatch
    option forwardfor
# Ready replicas (/readyz: PostgreSQL and Redis answer, not draining) get the traffic.
# When none is ready — PostgreSQL failing over is down for all of them at once — the
# live ones still do: holds and seat maps need only Redis, and a confirmation then
# answers 503 problem+json itself instead of HAProxy answering 503 to everything.
frontend holdfast
    bind $LISTEN
    use_backend ready if { nbsrv(ready) gt 0 }
    default_backend live
$(backend ready /readyz)
$(backend live /livez)
EOF
	if [ -f "$HA/haproxy.pid" ] && kill -0 "$(cat "$HA/haproxy.pid")" 2>/dev/null; then
		kill "$(cat "$HA/haproxy.pid")"
		sleep 0.5
	fi
	haproxy -D -f "$HA/haproxy.cfg" -p "$HA/haproxy.pid"
	for _ in $(seq 1 120); do
		curl -fsS -o /dev/null "http://$LISTEN/readyz" 2>/dev/null && return 0
		sleep 0.5
	done
	tail -20 "$HA/serve1.log" >&2
	die "http://$LISTEN/readyz does not answer"
}

stop_ha() {
	local f
	for f in "$HA"/serve*.pid "$HA"/haproxy.pid "$HA"/sentinel-*.pid "$HA"/redis-*.pid; do
		[ -f "$f" ] || continue
		kill "$(cat "$f")" 2>/dev/null || true
		rm -f "$f"
	done
	for f in node1 node2 monitor; do
		if [ -f "$HA/$f.pid" ]; then
			autoctl stop --pgdata "$HA/$f" >/dev/null 2>&1 || kill "$(cat "$HA/$f.pid")" 2>/dev/null || true
			rm -f "$HA/$f.pid"
		fi
	done
}

primary_node() {
	autoctl show state --pgdata "$HA/monitor" 2>/dev/null |
		awk -F'|' '$6 ~ / (primary|wait_primary) *$/ && $7 ~ / (primary|wait_primary) *$/ {gsub(/ /, "", $1); print $1}' | head -1
}

pick_dir
HA="$DIR/ha"
mkdir -p "$HA"
if is_root; then chown postgres: "$HA"; fi

case "${1:-start}" in
start)
	ha_packages
	start_pg_ha
	start_redis_ha
	echo "DATABASE_URL='$(database_url)'"
	echo "REDIS_URL='$(redis_url)'"
	;;
env)
	# The URLs of a running set-up (for make demo); fails when none runs.
	pid_alive serve1 || pid_alive serve2 || exit 1
	echo "DATABASE_URL='$(database_url)'"
	echo "REDIS_URL='$(redis_url)'"
	echo "HOLDFAST_URL='http://$LISTEN'"
	echo "HOLDFAST_ADMIN_URL='http://127.0.0.1:$((BASE + 91))'"
	;;
serve)
	[ -n "${2:-}" ] || die "usage: ha.sh serve BIN [SERVE FLAGS...]"
	bin="$2"
	shift 2
	serve_replicas "$bin" "$@"
	log "serving on http://$LISTEN (HAProxy over 127.0.0.1:$((BASE + 81)) and 127.0.0.1:$((BASE + 82)))"
	;;
failover)
	log "asking the monitor for a failover (primary now: $(primary_node))"
	autoctl perform failover --pgdata "$HA/monitor" >&2
	autoctl show state --pgdata "$HA/monitor" >&2
	;;
crash)
	node="$(primary_node)"
	[ -n "$node" ] || die "no primary"
	log "killing $node (its keeper and its PostgreSQL) with SIGKILL; the monitor promotes the standby"
	pm="$(head -1 "$HA/$node/postmaster.pid")"
	# The keeper's session (setsid) holds its services and, usually, PostgreSQL itself.
	pkill -9 -s "$(cat "$HA/$node.pid")" 2>/dev/null || true
	kill -9 "$pm" $(pgrep -P "$pm" || true) 2>/dev/null || true
	rm -f "$HA/$node.pid"
	;;
restart-node)
	# Bring a crashed node back: its keeper rejoins it as a standby.
	for n in node1 node2; do keeper "$n"; done
	;;
redis-failover)
	log "asking the Sentinels for a failover"
	redis-cli -p $((BASE + 381)) sentinel failover "$MASTER" >&2
	;;
kill-replica)
	n="${2:-1}"
	[ -f "$HA/serve$n.pid" ] || die "no serve replica $n"
	log "killing serve replica $n with SIGKILL"
	kill -9 "$(cat "$HA/serve$n.pid")" 2>/dev/null || true
	;;
primary)
	# The node the monitor has as primary now (for tests), or nothing.
	primary_node
	;;
status)
	autoctl show state --pgdata "$HA/monitor" 2>/dev/null || echo "postgresql: not running"
	echo "redis master: $(redis-cli -p $((BASE + 381)) sentinel get-master-addr-by-name "$MASTER" 2>/dev/null | tr '\n' ' ' || echo none)"
	for i in 1 2; do
		if [ -f "$HA/serve$i.pid" ] && kill -0 "$(cat "$HA/serve$i.pid")" 2>/dev/null; then echo "serve$i: running"; else echo "serve$i: stopped"; fi
	done
	;;
stop)
	stop_ha
	;;
*)
	die "usage: ha.sh start|serve BIN|failover|crash|restart-node|redis-failover|kill-replica N|status|stop"
	;;
esac
