#!/usr/bin/env bash
# Makes sure `redis-server` is there for the demo and the tests (they start their own servers on
# loopback). As root on Debian/Ubuntu it installs the package; otherwise it prints the one command
# to run and fails.
set -euo pipefail

if [ -n "${REDIS_SERVER:-}" ] && [ -x "${REDIS_SERVER}" ]; then
  exit 0
fi
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "redis-server not found: installing it with apt-get"
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server
  exit 0
fi
echo "redis-server is needed (the demo and the tests start their own servers on 127.0.0.1)." >&2
echo "Install it with:  sudo apt-get install -y redis-server" >&2
echo "or point REDIS_SERVER at a redis-server binary." >&2
exit 1
