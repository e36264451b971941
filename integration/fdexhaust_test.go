package integration

import (
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestDescriptorExhaustion: under ulimit -n 100 the default
// --max-open-journals (1,024) is clamped, with a warning saying to what.
// With --max-connections above what the limit allows, idle connections
// take every descriptor: a new connection is then refused at once
// (UNAVAILABLE, not a wait for the client's deadline), and once they close,
// writes work again within 5 s.
func TestDescriptorExhaustion(t *testing.T) {
	const nofile, flood = 100, 150
	ctx := testContext(t, 2*time.Minute)
	d := startLimited(t, nofile, "--max-connections", "10000")
	clamped := false
	for _, l := range d.logLines() {
		if l["msg"] == "--max-open-journals is more than the descriptor limit allows; clamped" {
			clamped = l["max_open_journals"] == float64(1024) && l["clamped_to"] == float64(18)
			t.Logf("%v", l)
		}
	}
	if !clamped {
		t.Error("no warning that --max-open-journals 1024 was clamped to 18 under ulimit -n 100")
	}
	c := d.client(t)
	var ids []string
	for i := range 30 {
		r, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Title: fmt.Sprint("s", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.GetSession().GetId())
	}
	write := func(i int) error {
		_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID("", ids[i%len(ids)]),
			Messages: []*sessiondv1.Message{textMsg(fmt.Sprint("m", i), sessiondv1.Role_ROLE_USER, "hi")}})
		return err
	}
	for i := range ids { // every journal opened once: the cache is full
		if err := write(i); err != nil {
			t.Fatal(err)
		}
	}

	var conns []net.Conn
	for range flood {
		nc, err := net.DialTimeout("tcp", d.Addr, 2*time.Second)
		if err != nil {
			break
		}
		conns = append(conns, nc)
	}
	closeAll := func() {
		for _, nc := range conns {
			_ = nc.Close()
		}
		conns = nil
	}
	t.Cleanup(closeAll)
	time.Sleep(500 * time.Millisecond) // let the daemon accept what it can

	fresh, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	start := time.Now()
	_, err = sessiondv1.NewSessionStoreServiceClient(fresh).GetServerInfo(testContext(t, 10*time.Second), &sessiondv1.GetServerInfoRequest{})
	took := time.Since(start)
	t.Logf("a new connection with no descriptor left: %v after %v", err, took.Round(time.Millisecond))
	if code := status.Code(err); code != codes.Unavailable || took > 3*time.Second {
		t.Errorf("a new connection with no descriptor left: %v after %v, want UNAVAILABLE within 3 s", err, took)
	}

	closeAll()
	freed := time.Now()
	for i := len(ids); ; i++ {
		err := write(i)
		if err == nil {
			t.Logf("writes work again %v after the descriptors were freed", time.Since(freed).Round(time.Millisecond))
			break
		}
		if time.Since(freed) > 5*time.Second {
			t.Fatalf("writes still fail 5 s after the descriptors were freed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !hasLog(d, "no file descriptor left: refusing new connections") {
		t.Error("no log line about connections refused for want of descriptors")
	}
}
