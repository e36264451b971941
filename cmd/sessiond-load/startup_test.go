package main

import "testing"

// TestStartup times two start-ups of the real sessiond binary after a clean
// stop and two after kill -9 under append load.
func TestStartup(t *testing.T) {
	var rep startupReport
	runDaemonMode(t, &rep, "startup", "--repeat", "2", "--load", "500ms", "--clients", "2")
	if len(rep.CleanMS) != 2 || len(rep.KilledMS) != 2 || rep.CleanMSMedian <= 0 || rep.KilledMSMedian <= 0 || rep.Appends == 0 ||
		rep.CleanOpenMSMedian <= 0 || rep.CleanOpenMSMedian > rep.CleanMSMedian {
		t.Errorf("report %+v: want 2 timed start-ups of each kind appends before the kills, and the store's open time within the start-up's", rep)
	}
}
