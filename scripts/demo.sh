#!/bin/sh
# Runs `outbox demo` and says what happens before it starts: on a machine
# where Go has compiled nothing yet, building the outbox command takes about
# two minutes, during which `go run ./cmd/outbox demo` prints nothing.
# Usage: scripts/demo.sh [demo flags], e.g. scripts/demo.sh --short
set -eu
cd "$(dirname "$0")/.."
bin="${OUTBOX_DEMO_BIN:-${TMPDIR:-/tmp}/outbox-demo-$(id -u)/outbox}"
mkdir -p "$(dirname "$bin")"
rm -f "$bin" # never start an older build if this one fails
echo "outbox demo: building the outbox command first (about 2 minutes on a machine where Go has compiled nothing yet, a few seconds after that)..." >&2
start=$(date +%s)
# go build -v names each package as it compiles it: count them on one line.
go build -v -o "$bin" ./cmd/outbox 2>&1 | {
	n=0
	while IFS= read -r pkg; do
		case "$pkg" in
		*" "*) echo "$pkg" >&2 ;; # a compiler message, not a package name
		*) n=$((n + 1)); printf '\r  compiled %d packages (%s)\033[K' "$n" "$pkg" >&2 ;;
		esac
	done
	[ "$n" -gt 0 ] && printf '\n' >&2
	true
}
[ -x "$bin" ] || { echo "outbox demo: the build failed (see above)" >&2; exit 1; }
echo "outbox demo: built in $(( $(date +%s) - start ))s; starting the demo" >&2
exec "$bin" demo "$@"
