#!/bin/sh
# The env file holds secrets: root and the holdfast group only. The service is not
# started: set DATABASE_URL and REDIS_URL in /etc/holdfast/holdfast.env first, then
# systemctl enable --now holdfast.
set -e
chgrp holdfast /etc/holdfast/holdfast.env
chmod 0640 /etc/holdfast/holdfast.env
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
