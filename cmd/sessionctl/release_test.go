package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestReleaseScript runs scripts/release.sh for this machine's target and
// checks what a user downloads: one archive and SHA256SUMS that verifies
// it, holding the three binaries, each printing the stamped version.
func TestReleaseScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three binaries")
	}
	for _, tool := range []string{"bash", "tar", "sha256sum", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	const version = "v0.0.0-releasetest"
	out := filepath.Join(t.TempDir(), "dist")
	target := runtime.GOOS + "/" + runtime.GOARCH
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "../../scripts/release.sh", version)
	cmd.Env = append(os.Environ(), "OUT="+out, "TARGETS="+target)
	listing, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("release.sh: %v\n%s", err, listing)
	}
	name := "sessiond_" + version + "_" + runtime.GOOS + "_" + runtime.GOARCH
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
		got, err := exec.Command(filepath.Join(dir, name, bin), "--version").Output()
		if err != nil || string(got) != bin+" "+version+"\n" {
			t.Errorf("%s --version: %q, %v; want %q", bin, got, err, bin+" "+version)
		}
	}
	for _, f := range []string{"README.md", "CHANGELOG.md", "packaging/sessiond.service"} {
		if _, err := os.Stat(filepath.Join(dir, name, f)); err != nil {
			t.Errorf("the archive lacks %s: %v", f, err)
		}
	}
}
