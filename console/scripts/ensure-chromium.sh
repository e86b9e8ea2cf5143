#!/bin/sh
# ensure-chromium.sh installs Debian's chromium for the console's browser
# tests when /usr/bin/chromium is missing (CI, a fresh machine). Needs root
# or sudo; about 3 minutes.
set -eu
if [ -x /usr/bin/chromium ]; then
	exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "installing chromium for the console browser tests"
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends chromium
test -x /usr/bin/chromium
