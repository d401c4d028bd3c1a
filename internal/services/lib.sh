# lib.sh — the shell helpers services.sh and ha.sh share (sourced, not run). The caller
# sets ROOT and DIR first.

log() { echo "services: $*" >&2; }
die() { echo "services: $*" >&2; exit 1; }

is_root() { [ "$(id -u)" = 0 ]; }

# as_pg runs a command as the PostgreSQL owner: "postgres" when we are root, else ourselves.
as_pg() {
	if is_root; then
		(cd / && runuser -u postgres -- "$@")
	else
		"$@"
	fi
}

apt_install() {
	is_root || die "$* missing and not root: install it (apt-get install $*) or set DATABASE_URL / REDIS_URL"
	command -v apt-get >/dev/null || die "$* missing and no apt-get: install it by hand or set DATABASE_URL / REDIS_URL"
	log "installing $* with apt-get"
	if [ ! -f "$DIR/.apt-updated" ]; then
		apt-get update -qq >&2
		mkdir -p "$DIR" && touch "$DIR/.apt-updated"
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

pg_bindir() {
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
			echo "$d"
			return 0
		fi
	done
	if command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/initdb" ]; then
		pg_config --bindir
		return 0
	fi
	return 1
}

ensure_packages() {
	if ! pg_bindir >/dev/null; then
		apt_install postgresql
	fi
	if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
		apt_install redis-server
	fi
}

# pick_dir makes sure the PostgreSQL owner can reach the data folder; a checkout under
# /root is closed to "postgres", so root falls back to a folder of its own under /var/tmp.
pick_dir() {
	mkdir -p "$DIR"
	if is_root && ! runuser -u postgres -- test -x "$DIR"; then
		local alt
		alt="/var/tmp/holdfast-$(echo -n "$ROOT" | sha1sum | cut -c1-12)"
		log "$DIR is not reachable by the postgres user; using $alt"
		DIR="$alt"
		mkdir -p "$DIR"
	fi
}
