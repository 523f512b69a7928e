#!/usr/bin/env bash
# The whole test suite (the command CI runs): unit tests, properties, the conformance suite on
# real servers for every adapter, the simulator, the chaos run, the redlock command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
exec cargo test --workspace "$@"
