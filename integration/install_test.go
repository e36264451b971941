package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The tests in this file install the client packages as a user would, into
// a place of their own, and use them from outside the repository against
// the real daemon.

// projectVersion is the repository's VERSION, which both packages carry.
func projectVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestPythonPackageInstalls installs clients/python with pip into a fresh
// virtual environment (Debian's grpcio and protobuf from the system, no
// package index) and uses the SDK from another directory, without
// PYTHONPATH.
func TestPythonPackageInstalls(t *testing.T) {
	needPython(t)
	if out, err := exec.Command(python, "-c", "import venv, ensurepip, setuptools").CombinedOutput(); err != nil {
		needTool(t, err, "python3-venv and python3-setuptools ("+strings.TrimSpace(string(out))+")")
	}
	ctx := testContext(t, scriptTimeout)
	dir := t.TempDir()
	venv := filepath.Join(dir, "venv")
	runScript(t, ctx, nil, python, "-m", "venv", "--system-site-packages", venv)
	out := runScript(t, ctx, nil, filepath.Join(venv, "bin", "pip"), "install", "--no-index", "--no-build-isolation", "./clients/python")
	if !strings.Contains(out, "Successfully installed sessiond-client-"+projectVersion(t)) {
		t.Fatalf("pip install: no %q in its output", "Successfully installed sessiond-client-"+projectVersion(t))
	}

	d := startDaemon(t, t.TempDir())
	const script = `
import importlib.metadata as md, json, sys
import sessiond_client
from sessiond.v1.sessiond_pb2 import Message, ROLE_USER
from google.rpc import status_pb2
client = sessiond_client.Client(sys.argv[1])
with client.open_or_create(alias="pip-installed") as h:
    h.append(Message(role=ROLE_USER, content="installed"))
with client.open(alias="pip-installed") as h:
    contents = [m.content for m in h.messages]
print(json.dumps({"file": sessiond_client.__file__, "version": md.version("sessiond-client"),
    "license": md.metadata("sessiond-client")["License"], "requires": md.requires("sessiond-client"), "contents": contents}))
`
	away := t.TempDir()
	cmd := exec.CommandContext(ctx, filepath.Join(venv, "bin", "python"), "-c", script, d.Addr)
	cmd.Dir = away
	cmd.Env = append(cleanEnv(), "PYTHONDONTWRITEBYTECODE=1")
	b, err := cmd.CombinedOutput()
	t.Logf("python from %s:\n%s", away, b)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		File, Version, License string
		Requires, Contents     []string
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got.File, venv+string(filepath.Separator)) {
		t.Errorf("sessiond_client came from %s, not from the virtual environment", got.File)
	}
	if got.Version != projectVersion(t) || got.License != "Apache-2.0" {
		t.Errorf("version %q, licence %q; want %q, Apache-2.0", got.Version, got.License, projectVersion(t))
	}
	if !slices.Equal(got.Requires, []string{"grpcio (>=1.51)", "protobuf (>=3.21)"}) && !slices.Equal(got.Requires, []string{"grpcio>=1.51", "protobuf>=3.21"}) {
		t.Errorf("requires %q, want grpcio and protobuf", got.Requires)
	}
	if !slices.Equal(got.Contents, []string{"installed"}) {
		t.Errorf("the session holds %q, want the one message appended", got.Contents)
	}
}

// TestNodePackagePacks packs clients/node with npm pack, installs the
// tarball into an empty project (no EBADENGINE on this Node.js) and uses
// both of its classes from there.
func TestNodePackagePacks(t *testing.T) {
	node := needClaudeSDK(t)
	npm, _ := exec.LookPath("npm")
	ctx := testContext(t, scriptTimeout)
	var pkg struct {
		Name, Version, License, Main, Types string
		Files                               []string
		Engines                             map[string]string
	}
	b, err := os.ReadFile(filepath.Join(moduleRoot, "clients", "node", "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	if pkg.Version != projectVersion(t) || pkg.License != "Apache-2.0" {
		t.Errorf("package.json: version %q, licence %q; want %q, Apache-2.0", pkg.Version, pkg.License, projectVersion(t))
	}

	dir := t.TempDir()
	out := runScript(t, ctx, nil, npm, "pack", "--json", "--pack-destination", dir, "./clients/node")
	var packed []struct {
		Filename string
		Files    []struct{ Path string }
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "["):]), &packed); err != nil || len(packed) != 1 {
		t.Fatalf("npm pack --json: %v", err)
	}
	var files []string
	for _, f := range packed[0].Files {
		files = append(files, f.Path)
	}
	for _, want := range []string{"package.json", "LICENSE", "dist/index.js", "dist/index.d.ts", "dist/store.js", "dist/store.d.ts", "proto/sessiond/v1/sessiond.proto"} {
		if !slices.Contains(files, want) {
			t.Errorf("the tarball lacks %s; it holds %q", want, files)
		}
	}
	for _, f := range files {
		if strings.HasPrefix(f, "src/") || strings.HasPrefix(f, "test/") || strings.HasPrefix(f, "node_modules/") {
			t.Errorf("the tarball holds %s", f)
		}
	}

	project := filepath.Join(dir, "app")
	if err := os.MkdirAll(project, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, "package.json"), []byte(`{"name":"app","private":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// With the Claude Agent SDK, whose foldSessionSummary the store uses
	// (its optional platform binaries are not needed for that).
	var dev struct {
		DevDependencies map[string]string
	}
	if err := json.Unmarshal(b, &dev); err != nil {
		t.Fatal(err)
	}
	sdk := "@anthropic-ai/claude-agent-sdk@" + dev.DevDependencies["@anthropic-ai/claude-agent-sdk"]
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--prefer-offline", "--omit=optional", filepath.Join(dir, packed[0].Filename), sdk)
	cmd.Dir = project
	b, err = cmd.CombinedOutput()
	t.Logf("npm install %s:\n%s", packed[0].Filename, b)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "EBADENGINE") {
		t.Errorf("npm install warns EBADENGINE on this Node.js")
	}

	d := startDaemon(t, t.TempDir())
	const script = `
const { SessiondSession, SessiondSessionStore } = require('sessiond-client');
(async () => {
  const store = new SessiondSessionStore({ address: process.argv[1], namespace: 'packed' });
  await store.append({ projectKey: 'p', sessionId: 's' }, [{ type: 'user', uuid: 'u1', message: { role: 'user', content: 'hi' } }]);
  const entries = await store.load({ projectKey: 'p', sessionId: 's' });
  store.close();
  const session = new SessiondSession({ address: process.argv[1], alias: 'packed' });
  await session.addItems([{ type: 'message', role: 'user', content: 'hello' }]);
  const items = await session.getItems();
  session.close();
  console.log(JSON.stringify({ entries, items, from: require.resolve('sessiond-client') }));
})().catch((err) => { console.error(err); process.exitCode = 1; });
`
	cmd = exec.CommandContext(ctx, node, "-e", script, d.Addr)
	cmd.Dir = project
	b, err = cmd.CombinedOutput()
	t.Logf("node in %s:\n%s", project, b)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Entries []map[string]any
		Items   []map[string]any
		From    string
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Entries) != 1 || got.Entries[0]["uuid"] != "u1" || len(got.Items) != 1 || got.Items[0]["content"] != "hello" {
		t.Errorf("got entries %v and items %v, want the one of each written", got.Entries, got.Items)
	}
	if !strings.HasPrefix(got.From, filepath.Join(project, "node_modules")+string(filepath.Separator)) {
		t.Errorf("sessiond-client came from %s, not from the project's node_modules", got.From)
	}
}
