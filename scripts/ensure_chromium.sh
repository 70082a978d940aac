#!/bin/sh
# The admin's browser tests (tests/browser) drive the system Chromium through Playwright;
# Playwright's own browser download is never used. Install Debian's package when missing.
set -eu
CHROMIUM="${OMLX_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure_chromium: $CHROMIUM is missing and apt-get is not here; install Chromium" \
       "and set OMLX_CHROMIUM to its path (the browser tests skip without it)" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
echo "ensure_chromium: installing Debian's chromium package" >&2
$SUDO apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium >/dev/null
test -x "$CHROMIUM"
