#!/usr/bin/env bash
# The library as a host application sees it: copies testdata/outside (a
# module example.com/host with one typed handler and a test of it written
# with s3tasktest) to a temporary directory, points its replace at this
# checkout, tidies it and runs its tests outside the workspace. Then it
# fails if the host's go.sum names a module that only the examples,
# s3taskotel, s3tasknats or s3tasklambda need (chromedp, prometheus, bbolt,
# OpenTelemetry, NATS, aws-lambda-go), so that
# depending on s3task never drags them in.
#
# One exception, computed rather than listed: the test kit's in-memory S3 is
# gofakes3, whose own go.mod requires bbolt for a backend s3task does not
# import. A go.sum line of a module that only gofakes3 requires in the
# host's module graph is reported but tolerated, as long as no package of
# it is built into the host or its tests (checked below).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
forbidden='^(github\.com/chromedp/|github\.com/prometheus/|go\.etcd\.io/bbolt[ /]|go\.opentelemetry\.io/|github\.com/nats-io/|github\.com/aws/aws-lambda-go[ /])'
forbidden_pkgs='^(github\.com/chromedp/|github\.com/prometheus/|go\.etcd\.io/bbolt(/|$)|go\.opentelemetry\.io/|github\.com/nats-io/|github\.com/aws/aws-lambda-go(/|$))'
tolerated_requirer='github.com/johannesboyne/gofakes3@'

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp -R "$root/testdata/outside/." "$tmp/"
cd "$tmp"
export GOWORK=off

go mod edit -replace "github.com/s3task/s3task=$root"
go mod tidy
go vet ./...
go test -count=1 ./...

fail=0
found=$(grep -E "$forbidden" go.sum || true)
if [ -n "$found" ]; then
  echo "go.sum of the host names chromedp, prometheus, bbolt or OpenTelemetry:"
  echo "$found"
  graph=$(go mod graph)
  for mv in $(echo "$found" | awk '{v=$2; sub("/go.mod$", "", v); print $1 "@" v}' | sort -u); do
    requirers=$(echo "$graph" | awk -v m="$mv" '$2 == m {print $1}' | sort -u)
    others=$(echo "$requirers" | grep -v "^$tolerated_requirer" || true)
    if [ -z "$requirers" ] || [ -n "$others" ]; then
      echo "  $mv: required by ${requirers:-nothing in the module graph}: not allowed"
      fail=1
    else
      echo "  $mv: required only by $(echo $requirers) (its own go.mod): tolerated"
    fi
  done
fi

# Nothing of those modules may be compiled into the host or its tests.
built=$(go list -deps -test ./... | grep -E "$forbidden_pkgs" || true)
if [ -n "$built" ]; then
  echo "the host builds packages of modules only the examples need:"
  echo "$built"
  fail=1
fi

if [ "$fail" -ne 0 ]; then
  echo "outside check: FAILED"
  exit 1
fi
echo "outside check: ok (go.sum modules: $(awk '{print $1}' go.sum | sort -u | wc -l))"
