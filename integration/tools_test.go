package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestGrpcurlReflection drives the daemon with grpcurl, which knows nothing
// of sessiond but what server reflection tells it.
func TestGrpcurlReflection(t *testing.T) {
	grpcurl := lookTool(t, "grpcurl")
	d := startDaemon(t, t.TempDir())
	ctx := testContext(t, 60*time.Second)
	run := func(args ...string) string {
		t.Helper()
		return runScript(t, ctx, nil, grpcurl, append([]string{"-plaintext"}, args...)...)
	}

	list := run(d.Addr, "list")
	for _, svc := range []string{"sessiond.v1.SessionStoreService", "grpc.health.v1.Health"} {
		if !strings.Contains(list, svc) {
			t.Errorf("grpcurl list does not show %s:\n%s", svc, list)
		}
	}
	desc := run(d.Addr, "describe", "sessiond.v1.SessionStoreService")
	for _, rpc := range []string{"CreateSession", "GetSession", "LoadSession", "ListSessions", "SaveSession", "AppendMessages", "UpdateSession", "DeleteSession", "ForkSession", "RewindSession", "SearchSessions", "WatchSession", "GetServerInfo"} {
		if !strings.Contains(desc, "rpc "+rpc+" (") {
			t.Errorf("grpcurl describe does not show rpc %s:\n%s", rpc, desc)
		}
	}
	// Message types resolve too, so requests can be written in JSON.
	if msg := run(d.Addr, "describe", "sessiond.v1.Message"); !strings.Contains(msg, "tool_calls") {
		t.Errorf("grpcurl describe sessiond.v1.Message:\n%s", msg)
	}
	if health := run(d.Addr, "grpc.health.v1.Health/Check"); !strings.Contains(health, `"SERVING"`) {
		t.Errorf("health check through grpcurl: %s", health)
	}
	info := run("-d", "{}", d.Addr, "sessiond.v1.SessionStoreService/GetServerInfo")
	// proto3 JSON: int64 limits are strings.
	if !strings.Contains(info, `"backend": "file"`) || !strings.Contains(info, `"maxMessageBytes": "16777216"`) {
		t.Errorf("GetServerInfo through grpcurl:\n%s", info)
	}
}

// TestSessionctl drives the daemon with the real sessionctl binary: health,
// listing, exit codes, and an export, delete and import round trip that
// must give back every session exactly as it was.
func TestSessionctl(t *testing.T) {
	if sessionctlBin == "" {
		t.Skip("the tree has no cmd/sessionctl")
	}
	d := startDaemon(t, t.TempDir())
	ctx := testContext(t, 60*time.Second)
	c := d.client(t)

	ctl := func(wantExit int, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, sessionctlBin, append([]string{"--addr", d.Addr}, args...)...)
		cmd.Env = cleanEnv()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("sessionctl %q: %v", args, err)
		}
		if code != wantExit {
			t.Fatalf("sessionctl %q exited %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, wantExit, stdout.String(), stderr.String())
		}
		return stdout.String()
	}

	if out := ctl(0, "health"); !strings.Contains(out, "SERVING") {
		t.Errorf("sessionctl health: %q", out)
	}
	conv := weatherConversation()
	a, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "ctl-a", Title: "A", Labels: map[string]string{"k": "v"}, Messages: conv})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if _, err := c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: byAlias("", "ctl-a"), MessageCount: 2, Alias: "ctl-fork"}); err != nil {
		t.Fatalf("ForkSession: %v", err)
	}
	if out := ctl(0, "--json", "ls"); strings.Count(out, "\n") != 2 || !strings.Contains(out, a.GetSession().GetId()) {
		t.Errorf("sessionctl --json ls: want two JSON lines naming the sessions, got:\n%s", out)
	}
	if out := ctl(0, "show", "ctl-a"); !strings.Contains(out, "What is the weather in Paris?") {
		t.Errorf("sessionctl show: %s", out)
	}
	ctl(3, "show", "nobody")
	ctl(2, "no-such-command")

	before := takeSnapshot(t, ctx, c, "")
	export := filepath.Join(t.TempDir(), "export.jsonl")
	ctl(0, "export", "--all", "--output", export)
	ctl(0, "rm", "--yes", "ctl-a", "ctl-fork")
	if list := mustList(t, ctx, c, &sessiondv1.ListSessionsRequest{}); len(list) != 0 {
		t.Fatalf("%d sessions left after sessionctl rm", len(list))
	}
	ctl(0, "import", export)
	after := takeSnapshot(t, ctx, c, "")
	// An import recreates sessions: their revisions and update times start
	// anew, so compare what the export promises to keep.
	for id, msgs := range before.loads {
		if diff := protoDiff(msgs, after.loads[id]); diff != "" {
			t.Errorf("session %s after export, rm and import (-before +after):\n%s", id, diff)
		}
		b, a := before.metas[id], after.metas[id]
		if a == nil {
			t.Errorf("session %s missing after import", id)
			continue
		}
		if a.GetAlias() != b.GetAlias() || a.GetTitle() != b.GetTitle() || !a.GetCreatedAt().AsTime().Equal(b.GetCreatedAt().AsTime()) ||
			protoDiff(b.GetParent(), a.GetParent()) != "" || protoDiff(b.GetLabels(), a.GetLabels()) != "" {
			t.Errorf("session %s after import = %v, want %v", id, a, b)
		}
	}
	if _, err := os.Stat(export); err != nil {
		t.Errorf("export file: %v", err)
	}
}
