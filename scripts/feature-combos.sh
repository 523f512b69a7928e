#!/usr/bin/env bash
# Every adapter beside every other, each with and without its features: one project may depend
# on any of them, and cargo unifies the `redis` crate's features across the build. Each line
# below is one such project (`cargo clippy` of those packages together, features as listed);
# a combination that cannot build, or builds with a warning, fails here.
set -euo pipefail
cd "$(dirname "$0")/.."

combos=(
  "-p redlock-tokio -p redlock-async-std --features redlock-tokio/tls"
  "-p redlock-tokio -p redlock-async-std --features redlock-async-std/tls"
  "-p redlock-tokio -p redlock-blocking --features redlock-blocking/tls"
  "-p redlock-async-std -p redlock-blocking --features redlock-blocking/tls"
  "-p redlock-tokio -p redlock-async-std -p redlock-blocking --features redlock-blocking/tls,redlock-tokio/metrics"
  "-p redlock-tokio --no-default-features"
  "-p redlock-async-std --no-default-features"
  "-p redlock-smol --no-default-features"
  "-p redlock-smol -p redlock-tokio --features redlock-smol/tls"
  "-p redlock-blocking --no-default-features"
  "-p redlock-redis --no-default-features"
  # The engine's shell with each runtime alone, its unit tests included: code only one
  # runtime's tests use must be gated to it.
  "-p redlock-redis --features tokio --all-targets"
  "-p redlock-redis --features smol --all-targets"
  "-p redlock-redis --features blocking --all-targets"
)
for combo in "${combos[@]}"; do
  echo "== cargo clippy $combo"
  # shellcheck disable=SC2086
  cargo clippy -q $combo -- -D warnings
done
echo "every combination builds"
