package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReleaseScript runs scripts/release.sh for one target that is not
// this machine's, darwin/arm64 (macOS on Apple silicon; the file store's
// per-OS files must keep it building), and checks what a user downloads:
// one archive and SHA256SUMS that verifies it, holding the three binaries
// built for that target, static, path-free and stamped with the version,
// and the documents. A release build compiles every dependency once more
// (-trimpath, no cgo), whatever the target, so the test builds only one;
// release.sh itself runs the stamped --version of the host's target when
// that target is among those it builds.
func TestReleaseScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three binaries")
	}
	for _, tool := range []string{"bash", "tar", "sha256sum", "git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	const version = "v0.0.0-releasetest"
	goos, goarch := "darwin", "arm64"
	out := filepath.Join(t.TempDir(), "dist")
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "../../scripts/release.sh", version)
	cmd.Env = append(os.Environ(), "OUT="+out, "TARGETS="+goos+"/"+goarch)
	start := time.Now()
	listing, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("release.sh: %v\n%s", err, listing)
	}
	t.Logf("release.sh for %s/%s took %v:\n%s", goos, goarch, time.Since(start).Round(time.Second), listing)
	name := "sessiond_" + version + "_" + goos + "_" + goarch
	for _, want := range []string{name + ".tar.gz", "SHA256SUMS"} {
		if !strings.Contains(string(listing), want) {
			t.Errorf("release.sh's listing lacks %s:\n%s", want, listing)
		}
	}
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(sums)), "  "+name+".tar.gz") {
		t.Fatalf("SHA256SUMS: %q, %v", sums, err)
	}
	check := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
	check.Dir = out
	if b, err := check.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum --check: %v\n%s", err, b)
	}
	dir := t.TempDir()
	if b, err := exec.Command("tar", "-xzf", filepath.Join(out, name+".tar.gz"), "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, b)
	}
	for _, bin := range []string{"sessiond", "sessionctl", "sessiond-load"} {
		// The binary cannot run here; its build information says how it
		// was built, whatever the target.
		info, err := exec.Command("go", "version", "-m", filepath.Join(dir, name, bin)).Output()
		if err != nil {
			t.Errorf("go version -m %s: %v", bin, err)
			continue
		}
		for _, want := range []string{
			"\tpath\tgithub.com/sessiond/sessiond/cmd/" + bin + "\n",
			"\tbuild\tGOOS=" + goos + "\n",
			"\tbuild\tGOARCH=" + goarch + "\n",
			"\tbuild\tCGO_ENABLED=0\n",
			"\tbuild\t-trimpath=true\n",
		} {
			if !strings.Contains(string(info), want) {
				t.Errorf("%s was not built with %q:\n%s", bin, strings.TrimSpace(want), info)
			}
		}
		// -trimpath leaves -ldflags out of the build information: the
		// version is in the binary only if -X main.version set it.
		b, err := os.ReadFile(filepath.Join(dir, name, bin))
		if err != nil || !bytes.Contains(b, []byte(version)) {
			t.Errorf("%s does not hold the stamped version %s (%v)", bin, version, err)
		}
	}
	for _, f := range []string{"README.md", "CHANGELOG.md", "packaging/sessiond.service"} {
		if _, err := os.Stat(filepath.Join(dir, name, f)); err != nil {
			t.Errorf("the archive lacks %s: %v", f, err)
		}
	}
}
