package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// The dashboard and alert rules shipped for operators.
const (
	dashboardPath  = "packaging/grafana/sessiond-dashboard.json"
	alertRulesPath = "packaging/prometheus/sessiond-alerts.yml"
	alertTestsPath = "packaging/prometheus/sessiond-alerts_test.yml"
)

// prometheusSynthesized are series Prometheus makes itself for every
// target, which no /metrics serves.
var prometheusSynthesized = []string{"up"}

// TestDashboardAndAlertRules loads the alert rules with Prometheus's own
// checker (promtool check rules), runs their unit tests (promtool test
// rules), and checks that every metric the
// dashboard's queries and the rules' expressions name is served by a live
// daemon's /metrics, so that a renamed metric cannot leave a panel blank
// or an alert silent.
func TestDashboardAndAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	needTool(t, err, "Debian's prometheus package (scripts/tools.sh does)")

	rulesFile := filepath.Join(moduleRoot, alertRulesPath)
	out, err := exec.CommandContext(t.Context(), promtool, "check", "rules", rulesFile).CombinedOutput()
	t.Logf("promtool check rules %s:\n%s", alertRulesPath, out)
	if err != nil {
		t.Fatalf("promtool check rules: %v", err)
	}
	m := regexp.MustCompile(`SUCCESS: (\d+) rules found`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("promtool did not report the rules it found")
	}
	ruleExprs := alertExprs(t, rulesFile)
	if n, _ := strconv.Atoi(string(m[1])); n != len(ruleExprs) || n == 0 {
		t.Fatalf("promtool found %s rules, the test read %d expressions", m[1], len(ruleExprs))
	}

	// The rules' own unit tests: alerts fire (and stay quiet) on given
	// series, with the annotations they print.
	out, err = exec.CommandContext(t.Context(), promtool, "test", "rules", filepath.Join(moduleRoot, alertTestsPath)).CombinedOutput()
	t.Logf("promtool test rules %s:\n%s", alertTestsPath, out)
	if err != nil {
		t.Fatalf("promtool test rules: %v", err)
	}

	dashExprs := dashboardExprs(t, filepath.Join(moduleRoot, dashboardPath))

	// A daemon that has served calls and flushed appends, so that every
	// family the queries read is in the scrape.
	d := startDaemon(t, t.TempDir(), "--metrics-listen", "127.0.0.1:0")
	base := metricsURL(t, d)
	ctx := testContext(t, time.Minute)
	c := d.client(t)
	resp, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Title: "dashboards"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", resp.GetSession().GetId()),
		Messages: []*sessiondv1.Message{textMsg("u1", sessiondv1.Role_ROLE_USER, "hello")}}); err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	// sessiond_store_disk_bytes appears once the first walk of the data
	// dir ends, in the background.
	for deadline := time.Now().Add(30 * time.Second); ; {
		clear(served)
		for series := range scrapeMetrics(t, base) {
			name, _, _ := strings.Cut(series, "{")
			served[name] = true
		}
		if served["sessiond_store_disk_bytes"] || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}

	for _, src := range []struct {
		file  string
		exprs []string
	}{{dashboardPath, dashExprs}, {alertRulesPath, ruleExprs}} {
		used := map[string]bool{}
		for _, e := range src.exprs {
			for _, name := range metricNames(e) {
				used[name] = true
			}
		}
		if len(used) == 0 {
			t.Errorf("%s names no metric", src.file)
		}
		for name := range used {
			if !served[name] && !slices.Contains(prometheusSynthesized, name) {
				t.Errorf("%s uses %s, which the daemon's /metrics does not serve", src.file, name)
			}
		}
	}
}

// dashboardExprs returns every query of the dashboard (its panels' targets
// and its template variables'), and checks that every panel but a row has
// one.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("%s: title %q, uid %q, %d panels; want all three", dashboardPath, dash.Title, dash.UID, len(dash.Panels))
	}
	var exprs []string
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardPath, p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("%s: panel %q has an empty query", dashboardPath, p.Title)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) == nil && q.Query != "" {
			// label_values(METRIC, LABEL) reads METRIC.
			exprs = append(exprs, labelValues.ReplaceAllString(q.Query, "$1"))
		}
	}
	return exprs
}

// alertExprs returns the expr of every rule in the rules file, written as
// "expr: EXPR" on one line or "expr: |" followed by a more indented block.
func alertExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	var block []string
	blockIndent := -1
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if blockIndent >= 0 {
			if strings.TrimSpace(line) == "" || indent > blockIndent {
				block = append(block, strings.TrimSpace(line))
				continue
			}
			exprs = append(exprs, strings.Join(block, " "))
			block, blockIndent = nil, -1
		}
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:")
		if !ok {
			continue
		}
		rest = strings.TrimSpace(rest)
		if rest == "|" || rest == ">" {
			blockIndent = indent
			continue
		}
		exprs = append(exprs, rest)
	}
	if blockIndent >= 0 {
		exprs = append(exprs, strings.Join(block, " "))
	}
	return exprs
}

var (
	labelValues     = regexp.MustCompile(`label_values\(\s*([^,)]+?)\s*,[^)]*\)`)
	promqlStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promqlMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlTokens    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*\s*\(?`)
	promqlOperators = []string{"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without", "on", "ignoring", "group_left", "group_right"}
)

// metricNames returns the metric names a PromQL expression reads: its
// identifiers once strings, label matchers, ranges, grouping clauses,
// function calls and keywords are set aside.
func metricNames(expr string) []string {
	e := promqlStrings.ReplaceAllString(expr, " ")
	e = promqlMatchers.ReplaceAllString(e, " ")
	e = promqlRanges.ReplaceAllString(e, " ")
	e = promqlGrouping.ReplaceAllString(e, " ")
	var names []string
	for _, tok := range promqlTokens.FindAllString(e, -1) {
		if strings.HasSuffix(tok, "(") {
			continue // a function or aggregation
		}
		tok = strings.TrimSpace(tok)
		if !slices.Contains(promqlOperators, tok) {
			names = append(names, tok)
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up{job="sessiond"} == 0`, []string{"up"}},
		{`histogram_quantile(0.99, sum by (le, grpc_method) (rate(grpc_server_handling_seconds_bucket{grpc_type="unary", x=~"a|b"}[5m])))`, []string{"grpc_server_handling_seconds_bucket"}},
		{`sum(rate(a_total{x="{y}"}[$__rate_interval])) / sum(rate(b_total[5m])) > 0.01 or vector(0)`, []string{"a_total", "b_total"}},
		{`process_open_fds / on (instance) group_left process_max_fds > bool 0.8`, []string{"process_open_fds", "process_max_fds"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}
