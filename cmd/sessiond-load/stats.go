package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// latencyMS summarises call latencies, in milliseconds.
type latencyMS struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// summarize sorts d in place and returns its nearest-rank percentiles.
func summarize(d []time.Duration) latencyMS {
	if len(d) == 0 {
		return latencyMS{}
	}
	slices.Sort(d)
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return latencyMS{
		P50:  ms(percentile(d, 50)),
		P90:  ms(percentile(d, 90)),
		P99:  ms(percentile(d, 99)),
		Max:  ms(d[len(d)-1]),
		Mean: ms(sum / time.Duration(len(d))),
	}
}

// percentile is the nearest-rank p-th percentile of sorted d.
func percentile(d []time.Duration, p int) time.Duration {
	rank := (p*len(d) + 99) / 100 // ceil(p/100 * n), 1-based
	return d[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median of xs (the mean of the middle two for an even count); xs keeps
// its order.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Sorted(slices.Values(xs))
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func (l latencyMS) rows(prefix string) [][2]string {
	return [][2]string{
		{prefix + " p50", fmtMS(l.P50)},
		{prefix + " p90", fmtMS(l.P90)},
		{prefix + " p99", fmtMS(l.P99)},
		{prefix + " max", fmtMS(l.Max)},
	}
}

func fmtMS(v float64) string   { return fmt.Sprintf("%.3f ms", v) }
func fmtRate(v float64) string { return fmt.Sprintf("%.0f/s", v) }

// payload is n random letters: message content that no layer could
// compress or deduplicate into a cheaper write.
func payload(n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[rand.IntN(len(letters))]
	}
	return string(b)
}
