#!/usr/bin/env bash
# Every publishable crate's docs as docs.rs builds them: all features, `--cfg docsrs` (so that
# each feature-gated item says which feature it needs), on nightly; warnings are errors.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "docs-rs: a nightly toolchain is needed (docs.rs builds with nightly): rustup toolchain install nightly" >&2
  exit 1
fi
# One cargo run for all of them (docs.rs builds each alone): with every feature of every crate
# on, one build shares the dependencies' metadata instead of building them once per crate.
crates=(redlock-core redlock-redis redlock-tokio redlock-smol redlock-async-std redlock-blocking
  redlock-local)
echo "== docs.rs build of ${crates[*]}"
RUSTDOCFLAGS="--cfg docsrs -D warnings" cargo +nightly doc -q --no-deps --all-features \
  "${crates[@]/#/-p}"
echo "docs-rs: every crate documents"
