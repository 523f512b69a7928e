#!/usr/bin/env bash
# The main job: a tour of redlock-rs on five real redis-servers it starts and stops itself.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
exec cargo run -p redlock-tests --example demo
