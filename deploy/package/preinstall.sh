#!/bin/sh
# The holdfast system user and group, before the files are unpacked.
set -e
if ! getent group holdfast >/dev/null; then
	groupadd --system holdfast
fi
if ! getent passwd holdfast >/dev/null; then
	useradd --system --gid holdfast --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin holdfast
fi
