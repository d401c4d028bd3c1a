package httpapi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDashboardAndAlertsUseRealMetrics: every metric the Grafana dashboard and the
// Prometheus alert rules (deploy/) query is one the code exports — a renamed metric
// fails here, not on an operator's empty panel. (promtool checks the rules' syntax and
// their unit tests in CI: make check-deploy.)
func TestDashboardAndAlertsUseRealMetrics(t *testing.T) {
	var defined []string
	for _, dir := range []string{"../engine", "."} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range regexp.MustCompile(`"(holdfast_[a-z_]+)"`).FindAllStringSubmatch(string(src), -1) {
				defined = append(defined, m[1])
			}
		}
	}
	if len(defined) < 20 {
		t.Fatalf("found %d metric names in the code; the search is broken", len(defined))
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	raw, err := os.ReadFile("../deploy/grafana/holdfast.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}
	rules, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s+expr: (.+)$`).FindAllStringSubmatch(string(rules), -1) {
		exprs = append(exprs, m[1])
	}
	if len(exprs) < 20 {
		t.Fatalf("%d queries in the dashboard and the rules", len(exprs))
	}
	for _, e := range exprs {
		for _, m := range regexp.MustCompile(`holdfast_[a-z_]+`).FindAllString(e, -1) {
			name := m
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(m, suffix); ok && slices.Contains(defined, base) {
					name = base
				}
			}
			if !slices.Contains(defined, name) {
				t.Errorf("%s (in %q) is not a metric the code exports", m, e)
			}
		}
	}
}
