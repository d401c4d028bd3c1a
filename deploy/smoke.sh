#!/usr/bin/env bash
# deploy/smoke.sh — make check-deploy, as root on a Debian machine, with DATABASE_URL
# and REDIS_URL of running services: the alert rules pass promtool (syntax and unit
# tests); the .deb (dist/) installs with dpkg, and holdfast starts from its env file as
# its systemd unit would start it (the unit's user, ExecStartPre, ExecStart), without
# systemd, serves a show and a hold, and stops on SIGTERM; the OCI image (make image)
# runs the static binary against the same database.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATABASE_URL:?DATABASE_URL must name the PostgreSQL to use}" "${REDIS_URL:?REDIS_URL must name the Redis to use}"
say() { echo "smoke: $*"; }
fail() { echo "smoke: FAILED: $*" >&2; exit 1; }

say "promtool: the alert rules and their unit tests"
promtool check rules deploy/prometheus/alerts.yml
(cd deploy/prometheus && promtool test rules alerts_test.yml)

dpkg --purge holdfast >/dev/null 2>&1 || true # a clean install, whatever ran before
if curl -s -o /dev/null http://127.0.0.1:18080/; then fail "port 18080 is taken: stop what listens there"; fi
deb="$(ls dist/holdfast_*_amd64.deb)"
say "dpkg -i $deb"
dpkg -i "$deb"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; dpkg --purge holdfast >/dev/null 2>&1 || true' EXIT
test -x /usr/bin/holdfast || fail "no /usr/bin/holdfast"
test -f /lib/systemd/system/holdfast.service || fail "no systemd unit"
id holdfast >/dev/null || fail "no holdfast user"
[ "$(stat -c '%a %U:%G' /etc/holdfast/holdfast.env)" = "640 root:holdfast" ] || fail "the env file is $(stat -c '%a %U:%G' /etc/holdfast/holdfast.env), want 640 root:holdfast"
/usr/bin/holdfast version

say "the operator's edit of /etc/holdfast/holdfast.env: this machine's backends and ports"
sed -i -e "s|^DATABASE_URL=.*|DATABASE_URL=$DATABASE_URL|" -e "s|^REDIS_URL=.*|REDIS_URL=$REDIS_URL|" \
	-e "s|^HOLDFAST_ADDR=.*|HOLDFAST_ADDR=127.0.0.1:18080|" -e "s|^HOLDFAST_ADMIN_ADDR=.*|HOLDFAST_ADMIN_ADDR=127.0.0.1:19090|" \
	/etc/holdfast/holdfast.env
token="smoke-operator-token-$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')"
echo "HOLDFAST_OPERATOR_TOKEN=$token" >>/etc/holdfast/holdfast.env

# as_unit runs a command the way the unit does: as the holdfast user, with only the
# env file's variables (read as systemd reads EnvironmentFile: KEY=value lines, no shell).
as_unit() {
	local vars=(PATH=/usr/bin:/bin) line
	while IFS= read -r line; do
		case "$line" in '' | '#'*) continue ;; esac
		vars+=("$line")
	done </etc/holdfast/holdfast.env
	# setpriv execs: the command is this process (a signal reaches it, its exit code
	# is the command's), as systemd's User= would run it.
	exec setpriv --reuid=holdfast --regid=holdfast --init-groups env -i "${vars[@]}" "$@"
}
say "ExecStartPre: holdfast migrate up"
(as_unit /usr/bin/holdfast migrate up)
say "ExecStart: holdfast serve"
(as_unit /usr/bin/holdfast serve) >/tmp/holdfast-smoke.log 2>&1 &
pid=$!
for _ in $(seq 1 100); do
	if curl -fs -o /dev/null http://127.0.0.1:18080/readyz 2>/dev/null; then break; fi
	kill -0 "$pid" 2>/dev/null || { cat /tmp/holdfast-smoke.log; fail "serve exited"; }
	sleep 0.1
done
curl -fsS http://127.0.0.1:18080/readyz >/dev/null || { cat /tmp/holdfast-smoke.log; fail "not ready"; }
show="smoke-$(date +%s)"
code="$(curl -s -o /dev/null -w '%{http_code}' -X PUT "http://127.0.0.1:19090/v1/shows/$show" \
	-H "Authorization: Bearer $token" -d '{"seats":["A1","A2"]}')"
[ "$code" = 201 ] || fail "show creation on the admin listener: $code"
code="$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:18080/v1/shows/$show/holds" \
	-H 'Holder-Id: smoke' -d '{"seats":["A1"]}')"
[ "$code" = 201 ] || fail "a hold: $code"
metrics="$(curl -fsS http://127.0.0.1:19090/metrics)"
grep -q '^holdfast_http_requests_total' <<<"$metrics" || fail "no metrics"
grep -q "$token" /tmp/holdfast-smoke.log && fail "the operator token is in the log"
kill -TERM "$pid"
wait "$pid" || fail "serve did not exit 0 on SIGTERM"
pid=""
say "the package serves, and stops cleanly"

if [ -f dist/image.txt ]; then
	image="$(cat dist/image.txt)"
	say "the image $image: the static binary on scratch"
	c="$(buildah --storage-driver vfs from "$image")"
	buildah --storage-driver vfs run --isolation chroot "$c" -- /holdfast version
	buildah --storage-driver vfs run --isolation chroot --env "DATABASE_URL=$DATABASE_URL" "$c" -- /holdfast migrate status
	buildah --storage-driver vfs rm "$c" >/dev/null
	[ "$(buildah --storage-driver vfs inspect --format '{{.OCIv1.Config.User}}' "$image")" = "65532:65532" ] || fail "the image runs as root"
fi
say "ok"
