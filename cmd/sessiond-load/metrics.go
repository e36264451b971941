package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sessiond/sessiond/internal/metrics"
)

// appendSeries is the server-side AppendMessages handling time, as the
// daemon's gRPC metrics name it.
const appendSeries = `{grpc_method="AppendMessages",grpc_service="sessiond.v1.SessionStoreService",grpc_type="unary"}`

// daemonMetrics is what the daemon's /metrics says about a timed run: the
// differences between a scrape just before it and one just after.
type daemonMetrics struct {
	Flushes         float64 `json:"flushes"`
	AppendsFlushed  float64 `json:"appends_flushed"`
	AppendsPerFlush float64 `json:"appends_per_flush"`
	FlushMeanMS     float64 `json:"flush_mean_ms"`
	HandlingMeanMS  float64 `json:"append_handling_mean_ms"`
}

func (d *daemonMetrics) rows() [][2]string {
	return [][2]string{
		{"daemon flushes", fmt.Sprintf("%.0f (%.0f appends)", d.Flushes, d.AppendsFlushed)},
		{"appends per flush", strconv.FormatFloat(d.AppendsPerFlush, 'f', 2, 64)},
		{"flush mean", fmtMS(d.FlushMeanMS)},
		{"append handling mean", fmtMS(d.HandlingMeanMS)},
	}
}

// scrapeDaemon reads the daemon's /metrics at c.metrics (host:port).
func scrapeDaemon(ctx context.Context, c *config) (metrics.Samples, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	url := "http://" + c.metrics + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	s, err := metrics.ParseText(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return s, nil
}

// diffMetrics computes the run's daemonMetrics from scrapes before and
// after it.
func diffMetrics(before, after metrics.Samples) *daemonMetrics {
	delta := func(series string) float64 { return after[series] - before[series] }
	mean := func(sum, count float64) float64 {
		if count == 0 {
			return 0
		}
		return sum / count * 1000
	}
	d := &daemonMetrics{
		Flushes:        delta("sessiond_store_flush_appends_count"),
		AppendsFlushed: delta("sessiond_store_flush_appends_sum"),
		FlushMeanMS:    mean(delta("sessiond_store_flush_seconds_sum"), delta("sessiond_store_flush_seconds_count")),
		HandlingMeanMS: mean(delta("grpc_server_handling_seconds_sum"+appendSeries), delta("grpc_server_handling_seconds_count"+appendSeries)),
	}
	if d.Flushes > 0 {
		d.AppendsPerFlush = d.AppendsFlushed / d.Flushes
	}
	return d
}
