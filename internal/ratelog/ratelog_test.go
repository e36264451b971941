package ratelog

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestLimiter(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	l := New(time.Minute)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	for range 540 {
		l.Log(log, zapcore.WarnLevel, "fold", "could not fold")
	}
	l.Log(log, zapcore.WarnLevel, "other", "another condition")
	if got := logs.Len(); got != 2 {
		t.Fatalf("%d lines for 540 repeats and one other condition, want 2", got)
	}
	now = now.Add(time.Minute)
	l.Log(log, zapcore.WarnLevel, "fold", "could not fold")
	all := logs.All()
	if len(all) != 3 || all[2].ContextMap()["suppressed"] != int64(539) {
		t.Fatalf("line after the interval: %v; want one with suppressed=539", all)
	}
}
