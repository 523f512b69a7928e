#!/usr/bin/env bash
# The main job: `redlock demo`, a one-minute tour on five real redis-servers it starts and stops
# itself (8 workers, one counter, nodes killed and restarted empty while they run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
exec cargo run --quiet -p redlock-cli --bin redlock -- demo "$@"
