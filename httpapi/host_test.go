package httpapi

import (
	"net"
	"strings"
	"testing"
)

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.1:7438": true, "127.9.9.9:1": true, "[::1]:7438": true, "::1": true,
		"localhost": true, "LOCALHOST:80": true, "localhost.": true, "app.localhost:3000": true,
		"": false, "example.com": false, "localhost.example.com": false, "10.0.0.1:7438": false,
		"[::ffff:8.8.8.8]:1": false, "0.0.0.0": false, "notlocalhost": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// FuzzLoopbackHost: a Host let through names only this machine: a
// loopback address, or localhost and names under it.
func FuzzLoopbackHost(f *testing.F) {
	for _, s := range []string{"127.0.0.1:1", "[::1]", "localhost", "a.localhost.", "evil.example", "[::1", "127.0.0.1:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		if !loopbackHost(host) {
			return
		}
		h := host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			h = hh
		}
		h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		if ip := net.ParseIP(h); ip != nil {
			if !ip.IsLoopback() {
				t.Fatalf("%q let through: %v is not loopback", host, ip)
			}
			return
		}
		name := strings.ToLower(strings.TrimSuffix(h, "."))
		if name != "localhost" && !strings.HasSuffix(name, ".localhost") {
			t.Fatalf("%q let through: %q is not localhost", host, name)
		}
	})
}
