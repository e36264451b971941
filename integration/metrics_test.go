package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/metrics"
	"github.com/sessiond/sessiond/internal/testcerts"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

// metricsURL returns the base URL the daemon logged for its metrics
// listener ("serving metrics", url http://ADDR/metrics).
func metricsURL(t *testing.T, d *daemon) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(d.Logs()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Msg string `json:"msg"`
			URL string `json:"url"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving metrics" {
			return strings.TrimSuffix(line.URL, "/metrics")
		}
	}
	t.Fatalf("the daemon did not log \"serving metrics\"; log:\n%s", d.Logs())
	return ""
}

// httpGet returns the status and body of GET url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	return httpGetToken(t, url, "")
}

// httpGetToken is httpGet with "Authorization: Bearer secret" ("" none).
func httpGetToken(t *testing.T, url, secret string) (int, string) {
	t.Helper()
	return httpGetWith(t, http.DefaultClient, url, secret)
}

// httpGetWith is httpGetToken through client.
func httpGetWith(t *testing.T, client *http.Client, url, secret string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// scrapeMetrics reads /metrics into series (as written, labels in the
// exposition's sorted order) -> value.
func scrapeMetrics(t *testing.T, base string) metrics.Samples {
	t.Helper()
	return scrapeMetricsToken(t, base, "")
}

// scrapeMetricsToken is scrapeMetrics with a bearer token.
func scrapeMetricsToken(t *testing.T, base, secret string) metrics.Samples {
	t.Helper()
	code, body := httpGetToken(t, base+"/metrics", secret)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	got, err := metrics.ParseText(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// handled names the grpc_server_handled_total series of a
// SessionStoreService method and code.
func handled(method, typ string, code codes.Code) string {
	return fmt.Sprintf(`grpc_server_handled_total{grpc_code=%q,grpc_method=%q,grpc_service="sessiond.v1.SessionStoreService",grpc_type=%q}`, code.String(), method, typ)
}

// TestMetricsAfterWorkload runs a known workload against the real daemon
// and checks the exact counts /metrics reports: calls by method and code,
// the appends the flushes made durable, the sessions, the open journals.
func TestMetricsAfterWorkload(t *testing.T) {
	const cacheBytes = 3 << 20
	d := startDaemon(t, t.TempDir(), "--metrics-listen", "127.0.0.1:0", "--cache-bytes", fmt.Sprint(cacheBytes))
	base := metricsURL(t, d)
	ctx := t.Context()
	c := d.client(t)

	// Before any call, every method's series exists at zero.
	before := scrapeMetrics(t, base)
	if v, ok := before[handled("AppendMessages", "unary", codes.OK)]; !ok || v != 0 {
		t.Errorf("before the workload: AppendMessages OK = %v (present %v), want 0", v, ok)
	}

	const creates, appends = 5, 12
	var ids []string
	for i := range creates {
		r, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: fmt.Sprintf("m-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.GetSession().GetId())
	}
	for i := range appends {
		_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{
			Ref:      byID("", ids[i%creates]),
			Messages: []*sessiondv1.Message{textMsg(fmt.Sprintf("a-%d", i), sessiondv1.Role_ROLE_USER, "hello")},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// A retry of an append that landed: OK, but no flush.
	if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{
		Ref:      byID("", ids[0]),
		Messages: []*sessiondv1.Message{textMsg("a-0", sessiondv1.Role_ROLE_USER, "hello")},
	}); err != nil {
		t.Fatal(err)
	}
	// Errors: a stale revision, an unknown session (twice), a bad alias.
	_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{
		Ref: byID("", ids[1]), ExpectedRevision: 1,
		Messages: []*sessiondv1.Message{textMsg("late", sessiondv1.Role_ROLE_USER, "x")},
	})
	wantCode(t, err, codes.Aborted)
	for range 2 {
		_, err = c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID("", "0190d4a8-0000-7000-8000-000000000000")})
		wantCode(t, err, codes.NotFound)
	}
	_, err = c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "no/slash"})
	wantCode(t, err, codes.InvalidArgument)
	if got := len(mustList(t, ctx, c, &sessiondv1.ListSessionsRequest{})); got != creates {
		t.Fatalf("listed %d sessions, want %d", got, creates)
	}
	// Every session's messages, read back from memory.
	for _, id := range ids {
		mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: byID("", id)})
	}

	got := scrapeMetrics(t, base)
	want := map[string]float64{
		handled("CreateSession", "unary", codes.OK):              creates,
		handled("CreateSession", "unary", codes.InvalidArgument): 1,
		handled("AppendMessages", "unary", codes.OK):             appends + 1,
		handled("AppendMessages", "unary", codes.Aborted):        1,
		handled("GetSession", "unary", codes.NotFound):           2,
		handled("GetSession", "unary", codes.OK):                 0,
		handled("ListSessions", "server_stream", codes.OK):       1,
		handled("LoadSession", "server_stream", codes.OK):        creates,
		`grpc_server_handling_seconds_count{grpc_method="AppendMessages",grpc_service="sessiond.v1.SessionStoreService",grpc_type="unary"}`: appends + 2,
		`grpc_server_msg_sent_total{grpc_method="ListSessions",grpc_service="sessiond.v1.SessionStoreService",grpc_type="server_stream"}`:   creates,
		// One client appending in turn: one flush per durable append; the
		// retry and the refused append flushed nothing.
		`sessiond_store_flush_appends_sum`:   appends,
		`sessiond_store_flush_appends_count`: appends,
		`sessiond_store_flush_seconds_count`: appends,
		`sessiond_store_sessions`:            creates,
		`sessiond_store_open_journals`:       creates,
		`sessiond_store_max_open_journals`:   1024,
		`sessiond_store_cache_max_bytes`:     cacheBytes,
	}
	for series, w := range want {
		if v, ok := got[series]; !ok || v != w {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, w)
		}
	}
	for _, series := range []string{
		`sessiond_store_disk_bytes`, `sessiond_store_cache_bytes`, `sessiond_store_flush_bytes_total`,
		`sessiond_store_cache_reads_total{result="hit"}`, `sessiond_store_flush_seconds_sum`,
		`go_goroutines`, `process_resident_memory_bytes`,
	} {
		if got[series] <= 0 {
			t.Errorf("%s = %v, want > 0", series, got[series])
		}
	}
	if got[`sessiond_store_flush_seconds_bucket{le="+Inf"}`] != appends {
		t.Errorf("flush latency histogram holds %v flushes, want %d", got[`sessiond_store_flush_seconds_bucket{le="+Inf"}`], appends)
	}
	if code, _ := httpGet(t, base+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("without --pprof: GET /debug/pprof/ = %d, want 404", code)
	}
	checkReadmeListsMetrics(t, got)
	d.stop(t)
}

// checkReadmeListsMetrics checks that docs/metrics.md names every
// sessiond_* and grpc_server_* metric family of a scrape.
func checkReadmeListsMetrics(t *testing.T, got metrics.Samples) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(moduleRoot, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	for series := range got {
		name, _, _ := strings.Cut(series, "{")
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && strings.Contains(section, "`"+base+"`") {
				name = base
			}
		}
		if (strings.HasPrefix(name, "sessiond_") || strings.HasPrefix(name, "grpc_server_")) && !strings.Contains(section, "`"+name+"`") {
			t.Errorf("docs/metrics.md does not list %s", name)
		}
	}
}

// TestMetricsPostgres: on PostgreSQL, /metrics has the sessions, the
// tables' size, the pool's statistics and the group commit's flushes, and
// no file-store metrics.
func TestMetricsPostgres(t *testing.T) {
	d := startPostgresDaemon(t, pgtest.Schema(t), "--metrics-listen", "127.0.0.1:0", "--postgres-max-conns", "6")
	base := metricsURL(t, d)
	c := d.client(t)
	for i := range 3 {
		alias := fmt.Sprintf("pg-%d", i)
		if _, err := c.CreateSession(t.Context(), &sessiondv1.CreateSessionRequest{Alias: alias, Title: "metrics"}); err != nil {
			t.Fatal(err)
		}
		msg := &sessiondv1.Message{Id: "m1", Role: sessiondv1.Role_ROLE_USER, Content: "hello"}
		if _, err := c.AppendMessages(t.Context(), &sessiondv1.AppendMessagesRequest{Ref: byAlias("", alias), Messages: []*sessiondv1.Message{msg}}); err != nil {
			t.Fatal(err)
		}
	}
	got := scrapeMetrics(t, base)
	for series, w := range map[string]float64{
		`sessiond_store_sessions`:                   3,
		`sessiond_postgres_pool_max_conns`:          6,
		handled("CreateSession", "unary", codes.OK): 3,
		`sessiond_store_flush_appends_sum`:          3,
	} {
		if v, ok := got[series]; !ok || v != w {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, w)
		}
	}
	for _, series := range []string{`sessiond_store_disk_bytes`, `sessiond_postgres_pool_acquires_total`, `sessiond_postgres_pool_new_conns_total`} {
		if got[series] <= 0 {
			t.Errorf("%s = %v, want > 0", series, got[series])
		}
	}
	if got[`sessiond_postgres_pool_conns{state="acquired"}`]+got[`sessiond_postgres_pool_conns{state="idle"}`] < 1 {
		t.Error("no connection acquired or idle in the pool")
	}
	buildInfo := false
	for series, v := range got {
		buildInfo = buildInfo || strings.HasPrefix(series, `sessiond_build_info{backend="postgres",goversion="`+runtime.Version()+`",version=`) && v == 1
	}
	if !buildInfo {
		t.Error("no sessiond_build_info 1 with backend postgres")
	}
	for _, fileOnly := range []string{`sessiond_store_cache_bytes`, `sessiond_store_open_journals`} {
		if _, ok := got[fileOnly]; ok {
			t.Errorf("%s present on PostgreSQL", fileOnly)
		}
	}
	checkReadmeListsMetrics(t, got)
	d.stop(t)
}

// TestMetricsPprof: --pprof serves net/http/pprof on the metrics listener.
func TestMetricsPprof(t *testing.T) {
	d := startDaemonEnv(t, t.TempDir(), []string{"SESSIOND_METRICS_LISTEN=127.0.0.1:0", "SESSIOND_PPROF=true"})
	base := metricsURL(t, d)
	code, body := httpGet(t, base+"/debug/pprof/")
	if code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("with --pprof: GET /debug/pprof/ = %d, want 200 listing the profiles:\n%s", code, body)
	}
	code, body = httpGet(t, base+"/debug/pprof/goroutine?debug=1")
	if code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Fatalf("GET /debug/pprof/goroutine?debug=1 = %d:\n%.300s", code, body)
	}
	if code, _ := httpGet(t, base+"/metrics"); code != http.StatusOK {
		t.Errorf("GET /metrics = %d, want 200", code)
	}
	d.stop(t)
}

// TestMetricsTokens: with --auth-tokens, the metrics listener wants a
// bearer token: any token for /metrics, an admin token for all namespaces
// for /debug/pprof/. And the gRPC metrics count calls the tokens refused.
func TestMetricsTokens(t *testing.T) {
	dir := t.TempDir()
	toks := newTestTokens(t, dir)
	d := startDaemon(t, filepath.Join(dir, "data"), "--auth-tokens", toks.file, "--metrics-listen", "127.0.0.1:0", "--pprof")
	base := metricsURL(t, d)
	for _, tc := range []struct {
		path, secret string
		want         int
	}{
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "sessiond_not-a-token", http.StatusUnauthorized},
		{"/metrics", toks.readA, http.StatusOK},
		{"/debug/pprof/", "", http.StatusUnauthorized},
		{"/debug/pprof/", toks.writeA, http.StatusForbidden},
		{"/debug/pprof/", toks.admin, http.StatusOK},
	} {
		if code, body := httpGetToken(t, base+tc.path, tc.secret); code != tc.want {
			t.Errorf("GET %s with token %q: %d, want %d\n%s", tc.path, tc.secret, code, tc.want, body)
		}
	}
	c := d.client(t)
	_, err := c.GetServerInfo(t.Context(), &sessiondv1.GetServerInfoRequest{})
	wantCode(t, err, codes.Unauthenticated)
	got := scrapeMetricsToken(t, base, toks.readA)
	if v := got[handled("GetServerInfo", "unary", codes.Unauthenticated)]; v != 1 {
		t.Errorf("GetServerInfo Unauthenticated = %v, want 1 (the metrics interceptors come before the token check)", v)
	}
	d.stop(t)
}

// TestMetricsTLS: a daemon with TLS serves its metrics over HTTPS with the
// same certificate; plain HTTP gets nothing.
func TestMetricsTLS(t *testing.T) {
	dir := t.TempDir()
	toks := newTestTokens(t, dir)
	ca := testcerts.NewCA(t, dir, "ca")
	certFile, keyFile, _ := ca.Issue(t, dir, "server", false)
	d := startDaemon(t, filepath.Join(dir, "data"), "--auth-tokens", toks.file, "--tls-cert", certFile, "--tls-key", keyFile,
		"--metrics-listen", "127.0.0.1:0")
	base := metricsURL(t, d)
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("metrics URL %s: want https", base)
	}
	pemBytes, err := os.ReadFile(ca.PEMFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pemBytes)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	t.Cleanup(client.CloseIdleConnections)
	if code, body := httpGetWith(t, client, base+"/metrics", toks.readA); code != http.StatusOK || !strings.Contains(body, "sessiond_store_sessions 0") {
		t.Errorf("GET /metrics over TLS with a token: %d\n%.300s", code, body)
	}
	if code, _ := httpGetWith(t, client, base+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics over TLS without a token: %d, want 401", code)
	}
	if code, _ := httpGet(t, "http://"+strings.TrimPrefix(base, "https://")+"/metrics"); code != http.StatusBadRequest {
		t.Errorf("plain HTTP to the TLS metrics listener: %d, want 400", code)
	}
	d.stop(t)
}

// TestMetricsHTTP: calls made through the JSON API of --http-listen are
// counted with the gRPC ones, by method and code.
func TestMetricsHTTP(t *testing.T) {
	d, h := startHTTPDaemon(t, t.TempDir(), "--metrics-listen", "127.0.0.1:0")
	base := metricsURL(t, d)
	h.call(t, "POST", "/v1/sessions", `{"alias": "over-http"}`, nil)
	h.fail(t, "POST", "/v1/sessions", `{"alias": "over-http"}`, http.StatusConflict, codes.AlreadyExists, "alias")
	if _, err := d.client(t).CreateSession(t.Context(), &sessiondv1.CreateSessionRequest{Alias: "over-grpc"}); err != nil {
		t.Fatal(err)
	}
	got := scrapeMetrics(t, base)
	for series, w := range map[string]float64{
		handled("CreateSession", "unary", codes.OK):            2,
		handled("CreateSession", "unary", codes.AlreadyExists): 1,
		`sessiond_store_sessions`:                              2,
	} {
		if v := got[series]; v != w {
			t.Errorf("%s = %v, want %v", series, v, w)
		}
	}
	d.stop(t)
}
