package main

import (
	"runtime"
	"testing"
)

// TestStartup times two start-ups of the real sessiond binary after a clean
// stop and two after kill -9 under append load, each until the daemon lists,
// with the daemon's CPU time by then where /proc says it.
func TestStartup(t *testing.T) {
	var rep startupReport
	runDaemonMode(t, &rep, "startup", "--repeat", "2", "--load", "500ms", "--clients", "2")
	if len(rep.CleanMS) != 2 || len(rep.KilledMS) != 2 || rep.CleanMSMedian <= 0 || rep.KilledMSMedian <= 0 || rep.Appends == 0 ||
		rep.CleanOpenMSMedian <= 0 || rep.CleanOpenMSMedian > rep.CleanMSMedian {
		t.Errorf("report %+v: want 2 timed start-ups of each kind appends before the kills, and the store's open time within the start-up's", rep)
	}
	if rep.CleanMSMax < rep.CleanMSMedian || rep.KilledMSMax < rep.KilledMSMedian {
		t.Errorf("report %+v: a maximum below its median", rep)
	}
	if runtime.GOOS == "linux" && (len(rep.CleanCPUMS) != 2 || len(rep.KilledCPUMS) != 2) {
		t.Errorf("report %+v: want the daemon's CPU time at each start-up", rep)
	}
}
