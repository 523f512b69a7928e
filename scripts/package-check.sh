#!/usr/bin/env bash
# Checks that every publishable crate would package for crates.io, without publishing anything.
#
# What it checks:
# 1. `cargo package --workspace` (all members but redlock-tests and redlock-bench, which are not
#    published) builds each crate's .crate file and resolves its normalized manifest: path
#    dependencies between our crates carry versions, and the crates not yet on crates.io are
#    resolved from the other tarballs of the same run (cargo >= 1.84 does this).
#    A dev-dependency with a version that closes a cycle (A dev-depends on B, B depends on A)
#    fails here, as it would fail `cargo publish`: give such a dev-dependency a path only.
# 2. It then *verifies* each tarball: builds its library and binaries alone from the unpacked
#    .crate, as crates.io users would get it — which catches files missing from the package.
#    It reaches the crates.io index and downloads dependencies; it never uploads.
# 3. Any `warning:` from cargo fails the check (a missing description, license, readme, a
#    compiler warning in the packaged build, ...), except for test targets a crate excludes on
#    purpose.
# 4. In each .crate: README.md and both licence texts are there; the manifest has description, license, repository,
#    documentation, readme, rust-version, keywords (at most 5, at most 20 characters each) and
#    categories; no file is above 1 MiB and the .crate stays far below crates.io's 10 MiB limit.
#
# Why not more:
# - Each tarball is verified with its default features only. `redlock-redis` builds without any
#   (its async client is behind `tokio` / `smol`, its blocking one behind `blocking`); the
#   adapters turn on what they need, so their verification builds those paths. docs.rs builds
#   every crate with all features ([package.metadata.docs.rs]).
# - Tests, examples and benches are not built from the tarballs (cargo's verification does not);
#   dev-dependencies without a version are stripped from the package, so some cannot be.
# - `cargo publish --dry-run` would also check the crates.io upload itself, but it needs every
#   dependency on crates.io already; ours are not. Category slugs and crate-name availability
#   on crates.io are not checked here (crates.io is the judge). `redlock` and `redlock-rs` there
#   are an older, unrelated crate family; none of our crates takes either name.
set -euo pipefail
cd "$(dirname "$0")/.."

crates=(redlock-core redlock-redis redlock-tokio redlock-smol redlock-async-std
  redlock-blocking redlock-local redlock-cli)
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
target_dir="$(scripts/target-dir.sh)"
[ -n "$version" ] && [ -n "$target_dir" ] || { echo "package-check: no version or target dir" >&2; exit 1; }

# Stale results of an earlier run must not pass for this one. Cargo verifies a crate that
# depends on another of ours against that one's tarball, served by a temporary overlay registry
# and unpacked into $CARGO_HOME/registry/src/-<hash>/<crate>-<version>, built in our target dir.
# Once such a copy exists cargo does not unpack the same name and version again, and the build
# looks fresh (packaged files carry a fixed old mtime), so a dependent crate would be verified
# against the code of an earlier run. So: remove the old tarballs, the unpacked copies, and the
# fingerprints of what was built from them (found by their dep-info files naming those paths).
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
names="$(IFS='|'; echo "${crates[*]}")"
for dep_info in "$target_dir"/debug/deps/*.d; do
  [ -f "$dep_info" ] || continue
  if grep -qE "registry/src/-[0-9a-f]+/($names)-$version/" "$dep_info"; then
    stem="$(basename "$dep_info" .d)"
    rm -rf "$target_dir"/debug/.fingerprint/*-"${stem##*-}"
  fi
done
for crate in "${crates[@]}"; do
  rm -f "$target_dir/package/$crate-$version.crate"
  for unpacked in "$cargo_home"/registry/src/-*/"$crate-$version"; do
    if [ -d "$unpacked" ]; then rm -rf "$unpacked"; fi
  done
done

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
echo "== cargo package --workspace (build and verify each .crate)"
if ! cargo package --workspace --allow-dirty \
  --exclude redlock-tests --exclude redlock-bench 2>&1 | tee "$log"; then
  echo "package-check: FAILED: cargo package (above)" >&2
  exit 1
fi

failed=0
fail() {
  echo "package-check: $*" >&2
  failed=1
}

# Except the test targets a crate leaves out on purpose (redlock-cli: `exclude = ["tests/"]`).
warnings="$(grep '^warning:' "$log" |
  grep -v '^warning: ignoring test `[^`]*` as `tests/[^`]*` is not included in the published package$' ||
  true)"
[ -z "$warnings" ] || fail "cargo warned: $warnings"

echo "== the contents of each .crate"
for crate in "${crates[@]}"; do
  file="$target_dir/package/$crate-$version.crate"
  if [ ! -f "$file" ]; then
    fail "$crate: no $file"
    continue
  fi
  dir="$crate-$version"
  # Listings are read whole before grep -q (which would cut tar off: a SIGPIPE under pipefail).
  listing="$(tar -tvzf "$file")"
  grep -q " $dir/README.md\$" <<<"$listing" || fail "$crate: README.md is not in the package"
  # The licence texts travel with the code (MIT requires its notice in every copy); each crate
  # links them from the repository root.
  for licence in LICENSE-MIT LICENSE-APACHE; do
    text="$(tar -xzOf "$file" "$dir/$licence" 2>/dev/null || true)"
    [ -n "$text" ] || fail "$crate: $licence is missing or empty in the package"
  done
  manifest="$(tar -xzOf "$file" "$dir/Cargo.toml")"
  for field in description license repository documentation readme rust-version keywords categories; do
    grep -q "^$field = " <<<"$manifest" || fail "$crate: no $field in [package]"
  done
  # The normalized manifest lists keywords one per line: `keywords = [`, `    "word",`, `]`.
  keywords="$(sed -n '/^keywords = \[/,/^\]/s/^ *"\(.*\)",*$/\1/p' <<<"$manifest")"
  if [ "$(grep -c . <<<"$keywords")" -gt 5 ]; then
    fail "$crate: more than 5 keywords"
  fi
  while read -r word; do
    [ "${#word}" -le 20 ] || fail "$crate: keyword '$word' is longer than 20 characters"
  done <<<"$keywords"
  # The size in bytes is the third column of `tar -tvzf`.
  big="$(awk '$3 > 1048576 { print $NF }' <<<"$listing")"
  [ -z "$big" ] || fail "$crate: files above 1 MiB: $big"
  size="$(wc -c <"$file")"
  [ "$size" -le 2097152 ] || fail "$crate: the .crate is $size bytes (over 2 MiB)"
  echo "$crate: $(grep -c . <<<"$listing") files, $size bytes"
done

if [ "$failed" -ne 0 ]; then
  echo "package-check: FAILED" >&2
  exit 1
fi
echo "package-check: all ${#crates[@]} crates package and verify"
