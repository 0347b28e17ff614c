package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/outbox"
)

// runDemo runs `outbox demo --short --json` in-process (relay-2 is this
// test binary re-executed as the command, see TestMain) and returns the
// output and the JSON summary of the last line.
func runDemo(t *testing.T, extra ...string) (string, map[string]any) {
	t.Helper()
	args := append([]string{"demo", "--short", "--json"}, extra...)
	out, errOut, code := cli(t, "", args...)
	if code != 0 {
		t.Fatalf("outbox %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var sum map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("the last line of stdout is not the JSON summary (%v):\n%s", err, out)
	}
	return out, sum
}

// checkDemoSummary asserts the guarantees and that every incident showed.
func checkDemoSummary(t *testing.T, out string, sum map[string]any) {
	t.Helper()
	n := func(k string) int {
		v, ok := sum[k].(float64)
		if !ok {
			t.Fatalf("summary lacks %q: %v", k, sum)
		}
		return int(v)
	}
	for _, k := range []string{"lost", "order_violations", "rolled_back_delivered", "rolled_back_visible", "unknown_delivered"} {
		if n(k) != 0 {
			t.Errorf("%s = %d, want 0\n%s", k, n(k), out)
		}
	}
	for _, k := range []string{"delivered", "retried", "expired", "rolled_back", "committed"} {
		if n(k) <= 0 {
			t.Errorf("%s = %d, want > 0 (the incident did not show)\n%s", k, n(k), out)
		}
	}
	// Incident 2 (the poison merchant) may not show on a machine too slow
	// for the compressed QR lifetime: every approval ran out before a
	// relay sent it, or the relay that got the 400 lost its lease before
	// recording it (the event then ran out). The demo says so, and the
	// gateway's own record proves it: every event it refused ended
	// EXPIRED.
	poisonShown := true
	switch slow := tooSlow(sum, "incident 2"); {
	case n("failed") > 0 && slow:
		t.Errorf("%d events FAILED, yet the demo says incident 2 could not show:\n%s", n("failed"), out)
	case n("failed") > 0:
	case n("poison_refused") > n("poison_refused_expired"):
		t.Errorf("the gateway refused %d events of the poison merchant, %d of them ended EXPIRED, and no event FAILED\n%s",
			n("poison_refused"), n("poison_refused_expired"), out)
	case !slow:
		t.Errorf("no event FAILED, and the demo does not say it was too slow to show incident 2\n%s", out)
	default:
		poisonShown = false
		t.Logf("the machine was too slow to show incident 2 (%d refused, all EXPIRED): checked that the demo said so", n("poison_refused"))
	}
	// On a loaded machine the demo may stop waiting with events still
	// moving: they must be in the outbox, counted as unsettled, and the
	// result say so.
	if got := n("processed") + n("failed") + n("expired") + n("blocked") + n("unsettled"); got != n("committed") {
		t.Errorf("processed+failed+expired+blocked+unsettled = %d, committed %d: some events are unaccounted for", got, n("committed"))
	}
	if n("unsettled") > 0 {
		if !strings.Contains(out, "gave up waiting after") || !strings.Contains(out, "result: ok, not settled: "+fmt.Sprint(n("unsettled"))) {
			t.Errorf("%d events unsettled, yet the output does not say the demo gave up waiting and was not settled:\n%s", n("unsettled"), out)
		}
		t.Logf("%d committed events were still moving when the demo stopped waiting (this machine is slow); each is in the outbox", n("unsettled"))
	} else if strings.Contains(out, "not settled") {
		t.Errorf("the output says not settled, the JSON summary counts no unsettled event:\n%s", out)
	}
	if n("delivered") < n("processed") {
		t.Errorf("delivered %d < processed %d: events marked PROCESSED that the gateway never accepted", n("delivered"), n("processed"))
	}
	if sum["ok"] != true {
		t.Errorf("ok = %v", sum["ok"])
	}
	checkDemoIncidents56(t, out, sum)
	wants := []string{"INCIDENT 1", "INCIDENT 2", "INCIDENT 3", "INCIDENT 4", "INCIDENT 5", "INCIDENT 6", "INCIDENT 7",
		"EXPIRED (retry_count", "summary:", "result: ok"}
	if poisonShown {
		wants = append(wants, "ALARM", "status      FAILED")
	}
	if _, slow := sum["too_slow"]; slow {
		wants = append(wants, "too slow: this machine could not show every incident", "try --time-scale")
	} else if strings.Contains(out, "too slow:") {
		t.Errorf("the output says the machine was too slow, the JSON summary does not:\n%s", out)
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// On a busy machine relay-1 may take all the work of incident 3; the
	// demo then kills relay-2 without a batch in flight and says so. (The
	// kill mid-batch itself is TestSIGKILLMidBatch's.)
	if !strings.Contains(out, "SIGKILL relay-2") && !strings.Contains(out, "killed it with SIGKILL anyway") {
		t.Errorf("output tells of no SIGKILL of relay-2:\n%s", out)
	}
}

// checkDemoIncidents56 asserts the maintenance and EDF incidents from the
// run's own figures: the breaker opened and closed, nothing FAILED during
// the maintenance, expired events name the outage, the EDF and FIFO runs
// accounted for every approval, and every expired approval's
// compensation reached the gateway.
func checkDemoIncidents56(t *testing.T, out string, sum map[string]any) {
	t.Helper()
	obj := func(k string) map[string]any {
		m, ok := sum[k].(map[string]any)
		if !ok {
			t.Fatalf("summary lacks %q: %v", k, sum)
		}
		return m
	}
	num := func(m map[string]any, k string) int {
		v, ok := m[k].(float64)
		if !ok {
			t.Fatalf("summary lacks %q: %v", k, m)
		}
		return int(v)
	}
	m := obj("maintenance")
	// On a machine too slow for the compressed QR lifetime, the events
	// written during the maintenance can run out before a relay claims
	// them: then no relay meets enough 503s to open the breaker.
	// The demo says so, and the gateway's count of requests per relay
	// during the outage proves it.
	slow := tooSlow(sum, "incident 5")
	switch most, limit := num(m, "most_outage_requests_one_relay"), num(m, "breaker_min_attempts"); {
	case num(m, "breaker_opened") >= 1 && slow:
		t.Errorf("maintenance: the breaker opened, yet the demo says incident 5 could not show:\n%s", out)
	case num(m, "breaker_opened") >= 1:
		// Under heavy load the probe can take longer than the incident's
		// wait: then the demo counts to the end of the run, and says so.
		if num(m, "breaker_closed") < 1 {
			t.Errorf("maintenance: breaker opened %d, closed %d times by the end of the run; want both at least once\n%s", num(m, "breaker_opened"), num(m, "breaker_closed"), out)
		} else if m["breaker_closed_late"] == true {
			if !strings.Contains(out, "the breaker has not closed yet") {
				t.Errorf("maintenance: the breaker closed after the incident, yet the incident's output does not say it had not closed yet\n%s", out)
			}
			t.Logf("maintenance: the breaker closed only after the incident stopped waiting for it (this machine is slow)")
		}
	case most >= limit || limit < 1:
		t.Errorf("maintenance: a relay met %d 503s during the outage (%d within the window open the breaker), yet the breaker never opened\n%s", most, limit, out)
	case !slow:
		t.Errorf("maintenance: the breaker never opened, and the demo does not say it was too slow to show incident 5\n%s", out)
	default:
		t.Logf("the machine was too slow to show incident 5 (at most %d requests from one relay during the outage): checked that the demo said so", most)
	}
	if num(m, "failed") != 0 {
		t.Errorf("maintenance: %d events FAILED; the breaker must keep an outage from spending retries\n%s", num(m, "failed"), out)
	}
	// Which of the relay (with the route's state: "destination
	// unavailable since") and the sweeper (without it: "deadline was")
	// expires an event first is a race the demo's short maintenance
	// window leaves open: on a loaded machine the sweeper can win every
	// one. The reason itself is asserted by
	// relay/breaker_e2e_test.go (at least 90% of a longer outage's
	// expiries); the demo shows whichever it got.
	if num(m, "expired_unavailable") > num(m, "expired") {
		t.Errorf("maintenance: %d EXPIRED, %d of them \"destination unavailable since\"\n%s", num(m, "expired"), num(m, "expired_unavailable"), out)
	} else if num(m, "expired_unavailable") == 0 {
		t.Logf("maintenance: none of the %d EXPIRED says \"destination unavailable since\": the sweeper expired them first", num(m, "expired"))
	}
	// On a loaded machine some events may still be moving when the demo
	// stops waiting for them, most of them even; the run's final
	// accounting, checkDemoSummary's, requires every one final.
	if got := num(m, "processed") + num(m, "expired") + num(m, "moving"); got != num(m, "events") || num(m, "events") == 0 {
		t.Errorf("maintenance: %d events, %d delivered + %d expired, %d moving; want each delivered, expired or still moving, none FAILED", num(m, "events"), num(m, "processed"), num(m, "expired"), num(m, "moving"))
	} else if num(m, "moving") > 0 {
		t.Logf("maintenance: %d of %d events were still moving when the demo stopped waiting (this machine is slow); the final accounting covers them", num(m, "moving"), num(m, "events"))
	}
	late := ""
	if m["breaker_closed_late"] == true {
		late = ", after the incident"
	}
	want := fmt.Sprintf("breaker opened %d, closed %d%s (routes audit log); of %d events %d delivered, %d EXPIRED (%d \"destination unavailable since ...\")",
		num(m, "breaker_opened"), num(m, "breaker_closed"), late, num(m, "events"), num(m, "processed"), num(m, "expired"), num(m, "expired_unavailable"))
	if !strings.Contains(out, want) {
		t.Errorf("the summary table lacks %q:\n%s", want, out)
	}
	e := obj("edf")
	if num(e, "approvals") == 0 || num(e, "met")+num(e, "missed") != num(e, "approvals") ||
		num(e, "fifo_approvals") != num(e, "approvals") || num(e, "fifo_met")+num(e, "fifo_missed") != num(e, "fifo_approvals") {
		t.Errorf("edf: approvals %d (met %d, missed %d), FIFO baseline %d (met %d, missed %d): want the same load, every approval final",
			num(e, "approvals"), num(e, "met"), num(e, "missed"), num(e, "fifo_approvals"), num(e, "fifo_met"), num(e, "fifo_missed"))
	}
	want = fmt.Sprintf("  %-20s %7d   incident 6: of %d approvals", "EDF met deadline", num(e, "met"), num(e, "approvals"))
	if !strings.Contains(out, want) || !strings.Contains(out, fmt.Sprintf("strict FIFO baseline: %d of %d", num(e, "fifo_met"), num(e, "fifo_approvals"))) {
		t.Errorf("the summary table lacks the EDF line (%q, FIFO %d of %d):\n%s", want, num(e, "fifo_met"), num(e, "fifo_approvals"), out)
	}
	// A compensation goes on its payment's aggregate: behind a dead letter
	// there (the poison merchant's, when its approval expired first) it
	// waits BLOCKED for an operator, as any event does.
	// Or still moving when the demo stopped waiting; such a compensation
	// may have reached the gateway before its outcome was recorded.
	comp := int(sum["compensations"].(float64))
	delivered := int(sum["compensations_delivered"].(float64))
	blockedComp, _ := sum["compensations_blocked"].(float64)
	unsettledComp, _ := sum["compensations_unsettled"].(float64)
	if comp == 0 || delivered+int(blockedComp) > comp || delivered+int(blockedComp)+int(unsettledComp) < comp {
		t.Errorf("compensations %d, delivered %d, blocked behind a dead letter %v, still moving %v: want every expired approval's ApprovalExpired at the gateway, BLOCKED or still moving",
			comp, delivered, blockedComp, unsettledComp)
	}
	checkDemoLegs(t, out, sum)
}

// checkDemoLegs asserts the two legs of the fan-out from the run's own
// figures: every event PROCESSED in the gateway's table accepted by the
// gateway, once; every event PROCESSED in Kafka's table read back by the
// consumer, in order per aggregate, on both topics; each destination's
// row in the summary table; and incident 7's claims: the gateway kept
// receiving while Kafka was down, repeated nothing because of it, and
// Kafka caught up.
func checkDemoLegs(t *testing.T, out string, sum map[string]any) {
	t.Helper()
	num := func(m map[string]any, k string) int {
		v, ok := m[k].(float64)
		if !ok {
			t.Fatalf("summary lacks %q: %v", k, m)
		}
		return int(v)
	}
	list, _ := sum["destinations"].([]any)
	dests := map[string]map[string]any{}
	for _, v := range list {
		if m, ok := v.(map[string]any); ok {
			name, _ := m["name"].(string)
			dests[name] = m
		}
	}
	gw, kafka := dests["gateway"], dests["kafka"]
	if gw == nil || kafka == nil {
		t.Fatalf("summary destinations %v: want gateway and kafka", sum["destinations"])
	}
	for name, d := range dests {
		if num(d, "lost") != 0 || num(d, "order_violations") != 0 {
			t.Errorf("%s: lost %d, order violations %d; want 0 and 0\n%s", name, num(d, "lost"), num(d, "order_violations"), out)
		}
		if num(d, "processed") == 0 || num(d, "received") < num(d, "processed") {
			t.Errorf("%s: %d PROCESSED in its table, %d received: want some, each received", name, num(d, "processed"), num(d, "received"))
		}
		if got := num(d, "processed") + num(d, "failed") + num(d, "expired") + num(d, "blocked") + num(d, "open"); got != num(d, "events") {
			t.Errorf("%s: %d events in its table, %d counted by status", name, num(d, "events"), got)
		}
		want := fmt.Sprintf("  %-20s %7d   %s: of %d events %d delivered", "-> "+name, num(d, "received"), d["table"], num(d, "events"), num(d, "processed"))
		if !strings.Contains(out, want) {
			t.Errorf("the summary table lacks %q:\n%s", want, out)
		}
	}
	// Once: a repeat the gateway recognised by Idempotency-Key comes only
	// from a crash (incident 3); an event it accepted and that is not
	// PROCESSED there is one whose answer the crash lost, then EXPIRED.
	if extra := num(gw, "received") - num(gw, "processed"); extra > num(gw, "expired") {
		t.Errorf("the gateway accepted %d events, %d PROCESSED and %d EXPIRED in its table", num(gw, "received"), num(gw, "processed"), num(gw, "expired"))
	}
	if num(gw, "repeats") > num(sum, "reaped")+2 {
		t.Errorf("the gateway saw %d repeats, %d events reaped after the crash: repeats beyond the crash's", num(gw, "repeats"), num(sum, "reaped"))
	}
	topics, _ := kafka["by_topic"].(map[string]any)
	if topics["payment.events"] == nil || topics["merchant.events"] == nil {
		t.Errorf("Kafka topics %v: want payment.events and merchant.events", kafka["by_topic"])
	}
	k, ok := sum["kafka_outage"].(map[string]any)
	if !ok {
		t.Fatalf("summary lacks kafka_outage: %v", sum)
	}
	if num(k, "gateway_repeats") != 0 {
		t.Errorf("incident 7: %d gateway requests repeated during Kafka's outage; want 0", num(k, "gateway_repeats"))
	}
	// On a machine too loaded, the service may write nothing for Kafka
	// (or the gateway accept nothing) while Kafka is down, however long
	// the demo keeps it down: the demo says so.
	if slow := tooSlow(sum, "incident 7"); slow != (num(k, "gateway_during") == 0 || num(k, "events") == 0) {
		t.Errorf("incident 7: the gateway accepted %d, %d events for Kafka were written, and the demo says too slow: %v\n%s",
			num(k, "gateway_during"), num(k, "events"), slow, out)
	} else if slow {
		t.Logf("the machine was too slow to show incident 7 (the gateway accepted %d, %d events for Kafka): checked that the demo said so", num(k, "gateway_during"), num(k, "events"))
		return
	}
	if num(k, "events") == 0 || num(k, "delivered")+num(k, "expired")+num(k, "moving") != num(k, "events") || num(k, "received") != num(k, "delivered") {
		t.Errorf("incident 7: %d events for Kafka, %d delivered (%d read back), %d EXPIRED, %d moving: want each delivered and read back, expired or moving",
			num(k, "events"), num(k, "delivered"), num(k, "received"), num(k, "expired"), num(k, "moving"))
	}
	if num(k, "delivered") == 0 {
		t.Errorf("incident 7: Kafka got none of the events written while it was down\n%s", out)
	}
	for _, want := range []string{"INCIDENT 7", "Kafka is back on", "Kafka caught up", "routes:", "to: [gateway, kafka]"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// tooSlow reports whether the summary says the machine was too slow to
// show the incident (e.g. "incident 5").
func tooSlow(sum map[string]any, incident string) bool {
	list, _ := sum["too_slow"].([]any)
	for _, v := range list {
		if s, _ := v.(string); strings.HasPrefix(s, incident+":") {
			return true
		}
	}
	return false
}

// TestDemoShortSQLite runs the short demo on its default backend and checks
// the summary and that progress off a terminal is plain lines.
func TestDemoShortSQLite(t *testing.T) {
	t.Parallel()
	out, sum := runDemo(t)
	checkDemoSummary(t, out, sum)
	if sum["backend"] != "sqlite" {
		t.Errorf("backend %v, want sqlite", sum["backend"])
	}
	if strings.ContainsAny(out, "\r\x1b") {
		t.Errorf("stdout is not a terminal, yet the output redraws (carriage return or escape sequence)")
	}
	progress := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "] progress ") {
			progress++
			if !strings.Contains(l, "PENDING") || !strings.Contains(l, "delivered/s") || !strings.Contains(l, "oldest pending") || !strings.Contains(l, "now: ") {
				t.Errorf("progress line lacks counts, rate, oldest pending age or the incident: %q", l)
			}
		}
	}
	if progress < 3 {
		t.Errorf("%d progress lines, want one a second", progress)
	}
}

// TestDemoShortPostgres runs the short demo with --db on PostgreSQL: its
// own fresh tables, dropped at the end.
func TestDemoShortPostgres(t *testing.T) {
	t.Parallel()
	dsn := postgresDSN(t) // a schema of its own, dropped whatever the demo leaves
	out, sum := runDemo(t, "--db", dsn, "--quiet")
	checkDemoSummary(t, out, sum)
	table, _ := sum["table"].(string)
	if sum["backend"] != "postgres" || !strings.HasPrefix(table, "demo_") {
		t.Fatalf("backend %v, table %q: want postgres and a fresh demo_ table", sum["backend"], table)
	}
	if strings.Contains(out, "] progress ") {
		t.Errorf("--quiet printed progress lines")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, name := range []string{table, table + "_payments", table + "_attempts", table + "_dead_letters", table + "_schema_migrations",
		table + "_to_gateway", table + "_to_kafka", table + "_to_gateway_schema_migrations", table + "_to_kafka_schema_migrations"} {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists {
			t.Errorf("table %s still exists after the demo (it must drop its tables unless --keep)", name)
		}
	}
}

// TestDemoShortMySQL runs the short demo with --db on MySQL/MariaDB: its
// own fresh tables, dropped at the end.
func TestDemoShortMySQL(t *testing.T) {
	t.Parallel()
	dsn := mysqlDSN(t) // a database of its own, dropped whatever the demo leaves
	out, sum := runDemo(t, "--db", dsn, "--quiet")
	checkDemoSummary(t, out, sum)
	table, _ := sum["table"].(string)
	if sum["backend"] != "mysql" || !strings.HasPrefix(table, "demo_") {
		t.Fatalf("backend %v, table %q: want mysql and a fresh demo_ table", sum["backend"], table)
	}
	b, err := openBackend(context.Background(), dsn, table, outbox.Limits{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if _, err := b.store.Stats(context.Background(), true); err == nil {
		t.Errorf("the demo's table %s still exists after the demo (it must drop its tables unless --keep)", table)
	}
}

func TestDemoFlagErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"demo", "--time-scale", "0.5"},
		{"demo", "--fail-rate", "0.9"},
		{"demo", "--rate", "10000"},
	} {
		_, errOut, code := cli(t, "", args...)
		if code != 2 || !strings.Contains(errOut, strings.TrimPrefix(args[1], "--")) {
			t.Errorf("outbox %s: exit %d, stderr %q; want exit 2 naming the flag", strings.Join(args, " "), code, errOut)
		}
	}
}
