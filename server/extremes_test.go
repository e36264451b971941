package server

import (
	"math"
	"testing"

	"go.uber.org/zap/zapcore"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestLoadExtremes: LoadSession with offset 1 and limit 2^63-1 panicked in
// the file store and was answered INTERNAL with a stack trace logged per
// call; it answers the messages from offset 1, and nothing is logged above
// info.
func TestLoadExtremes(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	se := h.create(t, &sessiondv1.CreateSessionRequest{Messages: []*sessiondv1.Message{user("a", "1"), user("b", "2"), user("c", "3")}})
	for _, c := range []struct {
		req  *sessiondv1.LoadSessionRequest
		want int
	}{
		{&sessiondv1.LoadSessionRequest{Offset: 1, Limit: math.MaxInt64}, 2},
		{&sessiondv1.LoadSessionRequest{Offset: math.MaxInt64, Limit: math.MaxInt64}, 0},
		{&sessiondv1.LoadSessionRequest{Tail: true, Limit: math.MaxInt64}, 3},
	} {
		c.req.Ref = byID(se.GetId())
		if _, msgs := h.load(t, c.req); len(msgs) != c.want {
			t.Errorf("LoadSession(offset %d, limit %d, tail %v): %d messages, want %d", c.req.Offset, c.req.Limit, c.req.Tail, len(msgs), c.want)
		}
	}
	if n := h.logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 0 {
		t.Errorf("%d error lines logged: %v", n, h.logs.FilterLevelExact(zapcore.ErrorLevel).All())
	}
}
