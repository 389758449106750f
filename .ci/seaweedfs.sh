#!/usr/bin/env bash
# Builds SeaweedFS's single binary, weed, into .cache/bin/weed unless a binary
# of the pinned version is already there. The tests use its S3 gateway as the
# third S3 implementation (internal/s3test/seaweedfs.go).
#
# `go install module@version` refuses this module because its go.mod has
# replace directives, so the script fetches the module through the module
# proxy, builds it inside a writable copy and removes the copy afterwards.
# From nothing this takes several minutes (the module has many dependencies);
# with the binary cached it returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."

module=github.com/seaweedfs/seaweedfs
version=v0.0.0-20261109003541-7506e5f91cd6 # `weed version`: 4.53

bindir="$PWD/.cache/bin"
bin="$bindir/weed"
stamp="$bin.version"
if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
  echo "weed $version: cached at $bin"
  exit 0
fi
mkdir -p "$bindir"

work=$(mktemp -d "${TMPDIR:-/tmp}/s3task-weed-build.XXXXXX")
cleanup() {
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Outside any module or workspace, so that neither go.work nor the project's
# go.mod takes part in the download.
dir=$(cd "$work" && GOWORK=off GOFLAGS= go mod download -json "$module@$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
  echo "seaweedfs.sh: go mod download gave no folder for $module@$version" >&2
  exit 1
fi

# The module cache is read-only; build in a copy.
cp -R "$dir" "$work/src"
chmod -R u+w "$work/src"

echo "weed $version: building (several minutes the first time)"
start=$(date +%s)
(cd "$work/src" && GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 \
  go build -trimpath -o "$work/weed" ./weed)
mv "$work/weed" "$bin"
echo "$version" >"$stamp"
echo "weed $version: built in $(($(date +%s) - start)) s"
"$bin" version
