package auth

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func hashHex(secret string) string {
	h := HashSecret(secret)
	return hex.EncodeToString(h[:])
}

func TestParse(t *testing.T) {
	good := `{"tokens": [
	  {"name": "a", "sha256": "` + hashHex("sa") + `", "namespaces": ["team-a", "", "team-a"], "role": "write"},
	  {"name": "ops", "sha256": "` + hashHex("so") + `", "namespaces": ["*"], "role": "admin"}
	]}`
	s, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	a, ok := s.Lookup("sa")
	if !ok || a.Name != "a" || a.Role != RoleWrite || len(a.Namespaces) != 2 {
		t.Fatalf("Lookup(sa) = %+v, %v", a, ok)
	}
	if !a.Allows("team-a") || !a.Allows("") || a.Allows("team-b") || !a.Can(RoleRead) || a.Can(RoleAdmin) {
		t.Fatalf("token a scope wrong: %+v", a)
	}
	ops, _ := s.Lookup("so")
	if !ops.Allows("anything") || !ops.Can(RoleAdmin) {
		t.Fatalf("ops: %+v", ops)
	}
	if _, ok := s.Lookup("sa "); ok {
		t.Fatal("a near miss matched")
	}
	// Marshal round-trips.
	again, err := Parse(s.Marshal())
	if err != nil || again.Len() != 2 || again.Tokens()[0].Hash != a.Hash {
		t.Fatalf("round trip: %v, %v", again, err)
	}

	h := hashHex("x")
	bad := []struct{ name, file, msgHas string }{
		{"empty", "  \n", "empty"},
		{"not json", "tokens:", "not a token file"},
		{"no list", `{}`, "no \"tokens\""},
		{"unknown field", `{"tokens": [], "extra": 1}`, "extra"},
		{"trailing data", `{"tokens": []} {}`, "after the JSON"},
		{"bad name", `{"tokens": [{"name": "a b", "sha256": "` + h + `", "namespaces": [""], "role": "read"}]}`, "token name"},
		{"short hash", `{"tokens": [{"name": "a", "sha256": "abcd", "namespaces": [""], "role": "read"}]}`, "64 hex"},
		{"plain secret", `{"tokens": [{"name": "a", "secret": "x", "namespaces": [""], "role": "read"}]}`, "secret"},
		{"bad role", `{"tokens": [{"name": "a", "sha256": "` + h + `", "namespaces": [""], "role": "root"}]}`, "read, write, admin"},
		{"no namespaces", `{"tokens": [{"name": "a", "sha256": "` + h + `", "namespaces": [], "role": "read"}]}`, "namespaces is empty"},
		{"bad namespace", `{"tokens": [{"name": "a", "sha256": "` + h + `", "namespaces": ["a/b"], "role": "read"}]}`, "namespace"},
		{"duplicate name", `{"tokens": [{"name": "a", "sha256": "` + h + `", "namespaces": [""], "role": "read"},
			{"name": "a", "sha256": "` + hashHex("y") + `", "namespaces": [""], "role": "read"}]}`, "twice"},
		{"duplicate hash", `{"tokens": [{"name": "a", "sha256": "` + h + `", "namespaces": [""], "role": "read"},
			{"name": "b", "sha256": "` + h + `", "namespaces": [""], "role": "read"}]}`, "same sha256"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.file))
			if err == nil || !strings.Contains(err.Error(), tt.msgHas) {
				t.Fatalf("Parse = %v; want an error naming %q", err, tt.msgHas)
			}
		})
	}
}

func TestNewSecret(t *testing.T) {
	a, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSecret()
	// 256 random bits: 43 base64url characters after the prefix.
	if a == b || !strings.HasPrefix(a, "sessiond_") || len(a) != len("sessiond_")+43 {
		t.Fatalf("secrets %q, %q", a, b)
	}
}

func TestAddRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	secret, err := AddToken(path, "agent", []string{"team-a"}, RoleRead)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), secret) || !strings.Contains(string(data), hashHex(secret)) {
		t.Fatalf("file holds the secret or lacks its hash:\n%s", data)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if _, err := AddToken(path, "agent", []string{"x"}, RoleRead); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("second add of the same name: %v", err)
	}
	if _, err := AddToken(path, "ops", nil, RoleAdmin); err == nil {
		t.Fatal("a token without namespaces was added")
	}
	s2, err := AddToken(path, "ops", []string{"*"}, RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ReadFile(path)
	if err != nil || s.Len() != 2 {
		t.Fatalf("ReadFile: %v, %v", s, err)
	}
	if tok, ok := s.Lookup(s2); !ok || tok.Name != "ops" {
		t.Fatalf("Lookup new secret: %+v %v", tok, ok)
	}
	if err := RemoveToken(path, "agent"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveToken(path, "agent"); !errors.Is(err, ErrNoToken) {
		t.Fatalf("second remove: %v", err)
	}
	s, _ = ReadFile(path)
	if _, ok := s.Lookup(secret); ok || s.Len() != 1 {
		t.Fatal("removed token still there")
	}
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*"))
	if len(matches) != 0 {
		t.Fatalf("stray temp files: %v", matches)
	}
}

func TestKeeperReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	if _, err := NewKeeper(path); err == nil {
		t.Fatal("NewKeeper of a missing file succeeded")
	}
	old, err := AddToken(path, "old", []string{""}, RoleRead)
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewKeeper(path)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := k.Reload(false); s != nil || err != nil {
		t.Fatalf("unchanged file reloaded: %v, %v", s, err)
	}
	if s, err := k.Reload(true); s == nil || err != nil {
		t.Fatalf("forced reload: %v, %v", s, err)
	}
	// A broken file keeps the tokens in use, and is reported once.
	if err := os.WriteFile(path, []byte(`{"tokens": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Reload(false); err == nil || !strings.Contains(err.Error(), "keeping the 1 tokens") {
		t.Fatalf("broken file: %v", err)
	}
	if s, err := k.Reload(false); s != nil || err != nil {
		t.Fatalf("broken file reported twice: %v, %v", s, err)
	}
	if _, ok := k.Lookup(old); !ok {
		t.Fatal("a broken file dropped the tokens in use")
	}
	// A good file replaces them.
	if err := os.WriteFile(path, []byte(`{"tokens": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := k.Reload(false); s == nil || err != nil || s.Len() != 0 {
		t.Fatalf("good file: %v, %v", s, err)
	}
	if _, ok := k.Lookup(old); ok {
		t.Fatal("removed token still accepted")
	}
	// A missing file keeps them too.
	_ = os.Remove(path)
	if _, err := k.Reload(false); err == nil {
		t.Fatal("missing file not reported")
	}
}

// FuzzParse: no input panics the parser, and what it accepts survives
// Marshal and Parse unchanged.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"tokens": [{"name": "a", "sha256": "` + hashHex("s") + `", "namespaces": ["", "*", "x"], "role": "admin"}]}`))
	f.Add([]byte(`{"tokens": []}`))
	f.Add([]byte(`{"tokens": [{"name": "a"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			return
		}
		again, err := Parse(s.Marshal())
		if err != nil {
			t.Fatalf("Marshal of a parsed file does not parse: %v\n%s", err, s.Marshal())
		}
		if string(again.Marshal()) != string(s.Marshal()) {
			t.Fatalf("round trip changed the file:\n%s\n%s", s.Marshal(), again.Marshal())
		}
	})
}

func TestParseBearer(t *testing.T) {
	for v, want := range map[string]string{
		"Bearer s3cret":     "s3cret",
		"bearer s3cret":     "s3cret",
		" BEARER  s3cret  ": "s3cret",
	} {
		if got, ok := ParseBearer(v); !ok || got != want {
			t.Errorf("ParseBearer(%q) = %q, %v; want %q, true", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "Bearer", "Bearer ", "Bearer   ", "Basic s3cret", "s3cret", "Bearers3cret"} {
		if got, ok := ParseBearer(v); ok {
			t.Errorf("ParseBearer(%q) = %q, true; want false", v, got)
		}
	}
}
