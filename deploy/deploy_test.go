// Package deploy holds the files for running the relay under Prometheus
// and Grafana; this test checks them.
package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/txoutbox/outbox/internal/testenv"
)

// promtool returns the path of promtool, or skips (fails under CI=true).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool is not on PATH: install Debian's package prometheus (apt-get install prometheus) to test the alert rules"
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "prometheus/outbox-alerts.yml"},
		{"test", "rules", "prometheus/outbox-alerts_test.yml"},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// TestEveryAlertIsTestedAndDocumented: each rule of outbox-alerts.yml has
// a unit test case and a runbook section in docs/OPERATIONS.md.
func TestEveryAlertIsTestedAndDocumented(t *testing.T) {
	t.Parallel()
	rules := read(t, "prometheus/outbox-alerts.yml")
	tests := read(t, "prometheus/outbox-alerts_test.yml")
	ops := strings.ToLower(read(t, "../docs/OPERATIONS.md"))
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(rules, -1)
	if len(alerts) < 7 {
		t.Fatalf("found %d alerts in outbox-alerts.yml", len(alerts))
	}
	for _, a := range alerts {
		name := a[1]
		if !regexp.MustCompile(`alertname: ` + name + `\s`).MatchString(tests) {
			t.Errorf("alert %s has no test in outbox-alerts_test.yml", name)
		}
		if !strings.Contains(ops, "### "+strings.ToLower(name)) {
			t.Errorf("alert %s has no runbook section (### %s) in docs/OPERATIONS.md", name, name)
		}
		if !strings.Contains(rules, "docs/OPERATIONS.md#"+strings.ToLower(name)) {
			t.Errorf("alert %s does not link its runbook section", name)
		}
	}
}

// TestDashboardIsValid: the dashboard is JSON Grafana can import, every
// panel has a query, and every query names only outbox_* metrics the
// metrics package defines (the real-scrape check is in cmd/outbox).
func TestDashboardIsValid(t *testing.T) {
	t.Parallel()
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(read(t, "grafana/outbox.json")), &dash); err != nil {
		t.Fatalf("grafana/outbox.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) < 10 {
		t.Fatalf("dashboard %q (uid %q) has %d panels", dash.Title, dash.UID, len(dash.Panels))
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if !strings.Contains(q.Expr, "outbox_") {
				t.Errorf("panel %q query %q names no outbox metric", p.Title, q.Expr)
			}
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
