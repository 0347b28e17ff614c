#!/usr/bin/env bash
# Mutation testing of the guarantee code (fencing, ordering, expiry, retries
# of the outcome write, the database clock) with gremlins. Not in CI: a run
# takes tens of minutes. Usage:
#
#   go install github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0
#   scripts/mutation.sh [relay] [postgres] [mysql] [mysql-claim] [sqlite] [lanes] [lanes-pg] [lanes-plan]   # default: all, one at a time
#
# The services of the README's test section must be up (PostgreSQL, MariaDB).
# Reports go to ${OUTBOX_MUTATION_OUT:-mutation-out}/<target>.{txt,json}.
#
# gremlins tests a mutant with the tests of the mutated package only, but the
# relay's guarantees are tested by the relay-over-store suite
# (relay/relaytest, TestRelayConformance) that each backend runs next to
# the Store conformance suite (TestConformance), and a backend's by its own
# package. So gremlins runs through a small
# `go` wrapper (put first on PATH) that replaces the package gremlins names
# with the packages that test the target (OUTBOX_MUT_PKGS) and adds -short,
# the target's -run and -skip filters. OUTBOX_MUT_RUN and OUTBOX_MUT_SKIP,
# when set, replace them (to test a target with fewer tests on a busy
# machine). Mutants of code that is not guarantee code (logging, metrics,
# configuration, admin commands) are excluded by file; the mysql,
# mysql-claim and sqlite targets name the files they mutate, so a file
# added to the package is not mutated by surprise.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$(realpath -m "${OUTBOX_MUTATION_OUT:-$root/mutation-out}")
mkdir -p "$out"
gremlins=$(command -v gremlins || echo "$(go env GOPATH)/bin/gremlins")
if [ ! -x "$gremlins" ]; then
	echo "gremlins not found: go install github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0" >&2
	exit 1
fi

shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
OUTBOX_REAL_GO=$(command -v go)
export OUTBOX_REAL_GO
cat >"$shim/go" <<'SHIM'
#!/usr/bin/env bash
# gremlins' go test: test the packages named in OUTBOX_MUT_PKGS instead.
if [ "${1:-}" = test ] && [ -n "${OUTBOX_MUT_PKGS:-}" ]; then
	shift
	args=("${@:1:$#-1}") # all but the last: the package gremlins chose
	# gremlins runs a mutant's tests in the package's directory of its copy
	# of the module; the packages are named from the module's root.
	while [ ! -e go.mod ] && [ "$PWD" != / ]; do cd ..; done
	# shellcheck disable=SC2086 # OUTBOX_MUT_PKGS is a list
	exec "$OUTBOX_REAL_GO" test -count=1 -short -run "${OUTBOX_MUT_RUN:-.}" -skip "${OUTBOX_MUT_SKIP:-^$}" "${args[@]}" $OUTBOX_MUT_PKGS
fi
exec "$OUTBOX_REAL_GO" "$@"
SHIM
chmod +x "$shim/go"

# target <name> <package dir> <files to leave out (regexp)> <test packages> <-run> [<-skip>]
target() {
	local name=$1 dir=$2 exclude=$3 pkgs=$4 run=${OUTBOX_MUT_RUN:-$5} skip=${OUTBOX_MUT_SKIP:-${6:-^\$}}
	echo "== $name: mutating ./$dir (not $exclude), testing with $pkgs -run '$run' -skip '$skip'"
	PATH="$shim:$PATH" OUTBOX_MUT_PKGS="$pkgs" OUTBOX_MUT_RUN="$run" OUTBOX_MUT_SKIP="$skip" \
		nice "$gremlins" unleash --workers 1 --test-cpu 0 --timeout-coefficient 3 \
		--coverpkg "./$dir" --exclude-files '_test\.go$' --exclude-files "$exclude" \
		--output "$out/$name.json" "./$dir" | tee "$out/$name.txt"
}

# all_but <package dir> <file>...: a regexp of the package's other non-test
# files, so that only the named files (without .go) are mutated.
all_but() {
	local dir=$1 f others=()
	shift
	for f in "$dir"/*.go; do
		f=$(basename "$f" .go)
		case $f in *_test) continue ;; esac
		[[ " $* " == *" $f "* ]] || others+=("$f")
	done
	local IFS='|'
	echo "(^|/)(${others[*]})\.go\$"
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(relay postgres mysql mysql-claim sqlite lanes lanes-pg)
for t in "${targets[@]}"; do
	case $t in
	relay) # claim.go, publish.go (expiry, deadlines, outcomes), complete.go (the outcome write and its retries), pipeline.go (order across batches), relay.go, sweeper.go
		target relay relay '(observer|route_health|config|counters)\.go$' \
			"./relay ./store/postgres" '^(TestClassify.*|TestHeldFor.*|TestPublish.*|TestTruncate|TestComplete.*|TestWaitSlot.*|TestClaimGets.*|TestSweep.*|TestRetention.*|TestConformance|TestRelayConformance)$' 'TestConformance/(Store|Snapshot)' ;;
	postgres) # enqueue.go (the per-aggregate lock), claim.go and claim_ids.go (the lanes' read and record), relay.go (complete, sweep, conflict retries), queries.go
		target postgres store/postgres "$(all_but store/postgres enqueue claim claim_ids relay queries)" \
			"./store/postgres" '^(TestConformance|TestRelayConformance|TestInterleaving|TestEnqueue|TestRetryable)' 'TestConformance/Snapshot' ;;
	mysql) # complete.go (fencing, the all-delivered path), delivered.go (the delivery on the row), time.go (the database clock), retry.go (conflict retries)
		target mysql store/mysql "$(all_but store/mysql complete delivered time retry)" \
			"./store/mysql" '^(TestConformance|TestRelayConformance|TestRetry|TestFormatTime)' 'TestConformance/Snapshot' ;;
	mysql-claim) # claim.go, claimruns.go and lanes.go (the lanes' read, runs, order, record), sweep.go (reaper, expiry, blocks), enqueue.go (the per-aggregate lock)
		target mysql-claim store/mysql "$(all_but store/mysql claim claimruns lanes sweep enqueue)" \
			"./store/mysql" '^(TestConformance|TestRelayConformance|TestPlanClaim|TestReadWindow|TestJSONDepth|TestAggregateLock|TestPlainInsertWaitsForEnqueue|TestEnqueue|TestDeep|TestLockOrder|TestProcessingRowWithoutToken|TestProducersWhileTwoRelaysClaim|TestSweep)' 'TestConformance/Snapshot' ;;
	sqlite) # relay.go (sweep), lanes.go (the lanes' read and record), complete.go (the outcome write), store.go (the clock, write transactions)
		target sqlite store/sqlite "$(all_but store/sqlite relay lanes complete store)" \
			"./store/sqlite" '^(TestConformance|TestRelayConformance|TestClaim|TestComplete|TestReaper|TestExpiry|TestConcurrentRelays|TestFormatTime)' 'TestConformance/Snapshot' ;;
	lanes) # claimer.go (reads, fences, cursors), lease.go (leases, balancing), plan.go (window, runs, order), lanesql.go: the Go the three backends share, tested through SQLite (the fastest backend to run the suites on); horizon.go is lanes-pg's
		target lanes store/internal/lanes '(^|/)(horizon|lost_answer)\.go$' \
			"./store/internal/lanes ./store/sqlite" '^(TestPlan.*|TestHorizon.*|TestClaim.*|TestConformance|TestRelayConformance|TestUpgradeToLanes|TestConcurrentRelays|TestReaperAfterShortLease|TestExpiry)$' 'TestConformance/(Snapshot|Requeue|Producers|Routes)|TestRelayConformance/Outcome/OutcomeRefusedWithoutClassIsIsolated' ;;
	lanes-plan) # plan.go alone (the planner: window, runs, holding back), with lanes' tests: a shorter run than lanes for a change to the planner
		target lanes-plan store/internal/lanes '(^|/)(claimer|lease|lanesql|horizon|lost_answer)\.go$' \
			"./store/internal/lanes ./store/sqlite" '^(TestPlan.*|TestClaim.*|TestConformance|TestRelayConformance|TestUpgradeToLanes|TestConcurrentRelays|TestReaperAfterShortLease|TestExpiry)$' 'TestConformance/(Snapshot|Requeue|Producers|Routes)|TestRelayConformance/Outcome/OutcomeRefusedWithoutClassIsIsolated' ;;
	lanes-pg) # horizon.go (PostgreSQL's late-commit horizon), through PostgreSQL
		target lanes-pg store/internal/lanes '(^|/)(claimer|lease|plan|lanesql|lost_answer)\.go$' \
			"./store/internal/lanes ./store/postgres" '^(TestHorizon.*|TestInterleaving.*|TestTruncate.*|TestClaimIDs.*|TestConformance)$' 'TestConformance/(Snapshot|Requeue|Producers|Routes|Deadlines)' ;;
	*)
		echo "unknown target $t (relay, postgres, mysql, mysql-claim, sqlite, lanes, lanes-pg, lanes-plan)" >&2
		exit 2
		;;
	esac
done
