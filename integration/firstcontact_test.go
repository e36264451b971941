package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sessiond/sessiond/internal/syncbuf"
)

// docBlock is one ```sh block of a document, as a reader pastes it.
type docBlock struct {
	doc, text string
}

// shBlocks returns the ```sh blocks of doc (relative to the repository)
// under the headings from the one named from up to the next heading of the
// same level, or to the heading named to when it is not empty.
func shBlocks(t *testing.T, doc, from, to string) []docBlock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot, doc))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut("\n"+string(b), "\n"+from+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", doc, from)
	}
	if to == "" {
		level, _, _ := strings.Cut(from, " ")
		to = level + " "
	}
	if i := strings.Index(rest, "\n"+to); i >= 0 {
		rest = rest[:i]
	}
	var blocks []docBlock
	for {
		_, after, ok := strings.Cut(rest, "\n```sh\n")
		if !ok {
			break
		}
		text, tail, ok := strings.Cut(after, "\n```\n")
		if !ok {
			t.Fatalf("%s: a ```sh block under %q is not closed", doc, from)
		}
		blocks = append(blocks, docBlock{doc: doc, text: text + "\n"})
		rest = "\n" + tail
	}
	if len(blocks) == 0 {
		t.Fatalf("%s has no ```sh block under %q", doc, from)
	}
	return blocks
}

// freshShell is one bash, as in a newcomer's terminal: blocks are pasted
// into it in order, so `export` and `cd` carry over and `&` makes a job.
type freshShell struct {
	t          *testing.T
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	out        *syncbuf.Buffer
	done       chan error
	marks      int
	addrs      map[string]string // documented address -> this test's
	daemonAddr []string
	grpcurl    string // the machine's grpcurl, linked in place of compiling it
}

// grpcurlInstall is the documented grpcurl install line. Compiling grpcurl
// takes minutes; the test links the copy scripts/tools.sh installed, of the
// same version, instead.
var grpcurlInstall = regexp.MustCompile(`(?m)^go install github\.com/fullstorydev/grpcurl/cmd/grpcurl@v1\.9\.4.*$`)

// startFreshShell starts bash in the repository with a fresh HOME and XDG
// folders, the Go caches of this machine (a fresh HOME must not rebuild or
// re-download every module), and the documented daemon addresses replaced
// by free ones: SESSIOND_LISTEN and SESSIOND_ADDR point the documented
// defaults there too, so no command touches 127.0.0.1:7437.
func startFreshShell(t *testing.T, ctx context.Context) *freshShell {
	t.Helper()
	home := t.TempDir()
	goEnv := map[string]string{}
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOROOT", "GOPATH"} {
		v, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", k, err)
		}
		goEnv[k] = strings.TrimSpace(string(v))
	}
	grpcFree, httpFree := freeAddr(t), freeAddr(t)
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "SESSIOND_") || strings.HasPrefix(k, "XDG_") || k == "HOME" || k == "GOPATH" || k == "GOBIN" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_DATA_HOME="+filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME="+filepath.Join(home, ".local", "state"),
		"XDG_CACHE_HOME="+filepath.Join(home, ".cache"),
		"GOCACHE="+goEnv["GOCACHE"],
		"GOMODCACHE="+goEnv["GOMODCACHE"],
		"PATH="+filepath.Join(goEnv["GOROOT"], "bin")+string(os.PathListSeparator)+os.Getenv("PATH"),
		"SESSIOND_LISTEN="+grpcFree,
		"SESSIOND_ADDR="+grpcFree,
		"PYTHONDONTWRITEBYTECODE=1", // keep the checkout clean
		"TERM=dumb",
	)
	sh := &freshShell{
		t:          t,
		cmd:        exec.CommandContext(ctx, "bash", "--noprofile", "--norc"),
		out:        &syncbuf.Buffer{},
		done:       make(chan error, 1),
		addrs:      map[string]string{"127.0.0.1:7437": grpcFree, "127.0.0.1:7438": httpFree},
		daemonAddr: []string{grpcFree, httpFree},
	}
	if p, err := exec.LookPath("grpcurl"); err == nil {
		sh.grpcurl = p
	} else if p := filepath.Join(goEnv["GOPATH"], "bin", "grpcurl"); fileExists(p) {
		sh.grpcurl = p
	}
	sh.cmd.Dir = moduleRoot
	sh.cmd.Env = env
	sh.cmd.Stdout = sh.out
	sh.cmd.Stderr = sh.out
	// Its own process group: the daemons it starts in the background end
	// with it.
	sh.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sh.cmd.Cancel = func() error { return syscall.Kill(-sh.cmd.Process.Pid, syscall.SIGKILL) }
	var err error
	if sh.stdin, err = sh.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := sh.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { sh.done <- sh.cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-sh.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-sh.done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-sh.cmd.Process.Pid, syscall.SIGKILL)
			<-sh.done
		}
	})
	// Echo each line as it is read, as a terminal shows what was typed; stop
	// at the first command that fails, as a reader would.
	sh.paste("set -v -e -o pipefail\n", "")
	return sh
}

// paste types text into the shell and waits until it has run; a command
// that fails ends the shell and the test.
func (sh *freshShell) paste(text, what string) {
	sh.t.Helper()
	for doc, real := range sh.addrs {
		text = strings.ReplaceAll(text, doc, real)
	}
	if sh.grpcurl != "" {
		text = grpcurlInstall.ReplaceAllString(text, `mkdir -p "$(go env GOPATH)/bin" && ln -sf `+sh.grpcurl+` "$(go env GOPATH)/bin/grpcurl" # the test: the same grpcurl, installed by scripts/tools.sh`)
	}
	sh.marks++
	mark := fmt.Sprintf("--- pasted %d ---", sh.marks)
	if _, err := io.WriteString(sh.stdin, text+"echo '"+mark+"'\n"); err != nil {
		sh.t.Fatalf("%s: the shell is gone (%v); it printed:\n%s", what, err, sh.out.String())
	}
	deadline := time.After(scriptTimeout)
	for !strings.Contains(sh.out.String(), "\n"+mark+"\n") {
		select {
		case err := <-sh.done:
			sh.done <- err
			sh.t.Fatalf("%s failed (the shell exited: %v); the terminal shows:\n%s", what, err, sh.out.String())
		case <-deadline:
			sh.t.Fatalf("%s did not finish in %v; the terminal shows:\n%s", what, scriptTimeout, sh.out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// run pastes blocks in order. After a block whose last command ends with
// "&" (a daemon in the background) it waits, as a reader watching the log
// would, until the daemon's addresses answer.
func (sh *freshShell) run(blocks []docBlock) {
	sh.t.Helper()
	for i, b := range blocks {
		sh.paste(b.text, fmt.Sprintf("%s block %d", b.doc, i+1))
		lines := strings.Split(strings.TrimSpace(b.text), "\n")
		last, _, _ := strings.Cut(lines[len(lines)-1], " # ")
		if strings.HasSuffix(strings.TrimSpace(last), "&") {
			for _, addr := range sh.daemonAddr {
				waitFor(sh.t, func() bool {
					c, err := net.DialTimeout("tcp", addr, time.Second)
					if err == nil {
						c.Close()
					}
					return err == nil
				}, b.doc+": the daemon started in the background listens on "+addr)
			}
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// freeAddr is a loopback address no one listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestFirstContactWalkthrough follows the documentation as a newcomer on a
// fresh machine would, in one terminal: the README from "Install" through
// its examples (the daemon in the background), sessionctl.md's and
// formats.md's commands against that daemon, then it stops the daemon as
// the README says and runs security.md's step-by-step CA, certificates,
// token and TLS daemon. Every command runs as written, in order, with HOME
// and the XDG folders in a temp dir; only the daemon's addresses are free
// ports instead of 7437 and 7438. The test prints the terminal.
func TestFirstContactWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("installs the commands and runs a walkthrough")
	}
	for _, tool := range []string{"bash", "curl", "openssl", "node"} {
		_, err := exec.LookPath(tool)
		needTool(t, err, tool)
	}
	needPython(t)
	if _, err := os.Stat(filepath.Join(moduleRoot, "clients", "node", "node_modules", "@grpc", "grpc-js")); err != nil {
		needTool(t, err, "the Node.js client's packages (npm ci --prefix clients/node)")
	}
	ctx := testContext(t, 2*scriptTimeout)
	sh := startFreshShell(t, ctx)
	defer func() { t.Logf("what a newcomer sees:\n%s", sh.out.String()) }()

	sh.run(shBlocks(t, "README.md", "## Install", "## Documentation"))
	for _, want := range []string{"SERVING", "What is 2+2?", `"content":"4"`, "ROLE_ASSISTANT"} {
		if !strings.Contains(sh.out.String(), want) {
			t.Errorf("the README's commands never printed %q", want)
		}
	}
	// The viewer page the README sends the reader to.
	viewer := "http://" + sh.addrs["127.0.0.1:7438"] + "/ui/sessions/demo"
	resp, err := http.Get(viewer)
	if err != nil {
		t.Fatalf("GET %s: %v", viewer, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("GET %s: %s %s, want 200 text/html", viewer, resp.Status, resp.Header.Get("Content-Type"))
	}

	sh.run(shBlocks(t, "docs/sessionctl.md", "# sessionctl", "**Contexts.**"))
	sh.run(shBlocks(t, "docs/formats.md", "# Other tools' formats", "**Nothing is dropped silently.**"))
	sh.paste("kill %1 && wait %1 || true\n", "stopping the README's daemon")

	sh.run(shBlocks(t, "docs/security.md", "## Step by step: a CA, certificates, a token", ""))
	// Without the token, the TLS daemon refuses; with it, it answered above.
	sh.paste(`sessionctl --addr 127.0.0.1:7437 --tls-ca ca.pem --tls-cert client.pem --tls-key client.key --namespace team-a ls || echo "exit status $?"`+"\n", "ls without a token")
	if s := sh.out.String(); !strings.Contains(s, "UNAUTHENTICATED") && !strings.Contains(s, "unauthenticated") {
		t.Errorf("sessionctl without a token was not refused as unauthenticated")
	}
	if strings.Contains(sh.out.String(), `{"code":`) {
		t.Errorf("a curl command of the walkthrough answered an error")
	}
	sc := bufio.NewScanner(strings.NewReader(sh.out.String()))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "command not found") {
			t.Errorf("the terminal shows %q", sc.Text())
		}
	}
}
