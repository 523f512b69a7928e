#!/usr/bin/env bash
# Prints the workspace's target directory (where cargo builds: `target/` unless
# CARGO_TARGET_DIR or a config says otherwise), or fails saying it found none.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
[ -n "$dir" ] || { echo "target-dir: cargo metadata named no target directory" >&2; exit 1; }
echo "$dir"
