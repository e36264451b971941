package main

import "testing"

// TestOpenJournalsFor: --max-open-journals is clamped to half of the
// descriptors left after the reserve, and kept when the limit is unknown
// or large enough.
func TestOpenJournalsFor(t *testing.T) {
	for _, c := range []struct {
		requested int
		nofile    uint64
		want      int
	}{
		{1024, 100, 18},
		{1024, 1024, 480},
		{1024, 0, 1024},
		{10, 1 << 16, 10},
		{1024, 50, 1},
	} {
		if got := openJournalsFor(c.requested, c.nofile); got != c.want {
			t.Errorf("openJournalsFor(%d, %d) = %d, want %d", c.requested, c.nofile, got, c.want)
		}
	}
}
