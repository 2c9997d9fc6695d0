#!/bin/sh
# Fetch ONNX Runtime's C/C++ API headers (no PyPI wheel ships them) from
# Debian 13 "trixie"'s libonnxruntime-dev into DEST, using a private apt
# configuration: the system's sources, lists and caches are never touched.
#   usage: fetch_ort_headers.sh DEST      -> DEST/usr/include/onnxruntime/*.h
set -eu
dest=${1:?usage: fetch_ort_headers.sh DEST}
mirror=${GELU_ONNX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-trixie-stable.gpg
[ -r "$keyring" ] || keyring=/usr/share/keyrings/debian-archive-keyring.gpg
command -v apt-get >/dev/null || { echo "fetch_ort_headers: apt-get not found; set ONNXRUNTIME_ROOT instead" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/deb"
printf 'deb [signed-by=%s] %s trixie main\n' "$keyring" "$mirror" > "$work/sources.list"
: > "$work/status"
opts="-o Dir::Etc::SourceList=$work/sources.list -o Dir::Etc::SourceParts=/dev/null
      -o Dir::State::Lists=$work/lists -o Dir::State::Status=$work/status
      -o Dir::Cache=$work/cache -o Dir::Etc::Preferences=/dev/null
      -o Dir::Etc::PreferencesParts=/dev/null -o APT::Sandbox::User=root
      -o Acquire::Languages=none -o APT::Architecture=$(dpkg --print-architecture)"
# shellcheck disable=SC2086
apt-get $opts -q update >"$work/update.log" 2>&1 || { cat "$work/update.log" >&2; exit 1; }
# shellcheck disable=SC2086
(cd "$work/deb" && apt-get $opts -q download libonnxruntime-dev) >"$work/dl.log" 2>&1 || { cat "$work/dl.log" >&2; exit 1; }
mkdir -p "$dest"
dpkg-deb -x "$work"/deb/libonnxruntime-dev_*.deb "$dest"
test -f "$dest/usr/include/onnxruntime/onnxruntime_c_api.h"
echo "fetch_ort_headers: $(basename "$work"/deb/*.deb) -> $dest/usr/include/onnxruntime"
