package client

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

func testSpoolState() spoolState {
	return spoolState{
		session: &sessiondv1.Session{
			Id: "0190a0b0-0000-7000-8000-000000000001", Namespace: "team", Revision: 7,
			Summary: "s", Metadata: map[string]string{"k": "v"},
			Messages: []*sessiondv1.Message{
				{Id: "m1", Role: sessiondv1.Role_ROLE_USER, Content: "hello"},
				{Id: "m2", Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "héllo \x1b[D", ToolCalls: []*sessiondv1.ToolCall{{Id: "t", Name: "f", Arguments: `{"a": 1}`}}},
			},
		},
		flags: spoolSummary | spoolMetadata,
	}
}

func TestSpoolRoundTrip(t *testing.T) {
	st := testSpoolState()
	b, err := encodeSpool(st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeSpool(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.flags != st.flags {
		t.Errorf("flags = %b, want %b", got.flags, st.flags)
	}
	if d := cmp.Diff(st.session, got.session, protocmp.Transform()); d != "" {
		t.Errorf("session (-want +got):\n%s", d)
	}
	// Every truncation and every single-byte change is caught.
	for n := range len(b) {
		if _, err := decodeSpool(b[:n]); !errors.Is(err, errSpoolDamaged) {
			t.Fatalf("decode of the first %d bytes = %v, want errSpoolDamaged", n, err)
		}
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x01
		if _, err := decodeSpool(c); !errors.Is(err, errSpoolDamaged) {
			t.Fatalf("decode with byte %d flipped = %v, want errSpoolDamaged", i, err)
		}
	}
}

// TestWriteFileAtomic: the file is replaced whole, 0600, and no temporary
// file stays behind.
func TestWriteFileAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	p := filepath.Join(dir, "x.spool")
	for _, data := range []string{"first version", "second"} {
		if err := writeFileAtomic(p, []byte(data)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != data {
			t.Fatalf("read %q, %v; want %q", got, err, data)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("dir holds %d entries, want only the file", len(ents))
	}
	for path, want := range map[string]os.FileMode{p: 0o600, dir: 0o700 | os.ModeDir} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode(), err, want)
		}
	}
	if err := removeDurably(p); err != nil {
		t.Fatal(err)
	}
	if err := removeDurably(p); err != nil {
		t.Errorf("removing a missing file: %v", err)
	}
}

func FuzzDecodeSpool(f *testing.F) {
	b, err := encodeSpool(testSpoolState())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(spoolMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeSpool(b)
		if err != nil {
			if !errors.Is(err, errSpoolDamaged) {
				t.Fatalf("decode error %v is not errSpoolDamaged", err)
			}
			return
		}
		// What decodes encodes again and decodes to the same state.
		again, err := encodeSpool(st)
		if err != nil {
			t.Fatal(err)
		}
		st2, err := decodeSpool(again)
		if err != nil || st2.flags != st.flags {
			t.Fatalf("re-decode: %v, flags %b vs %b", err, st2.flags, st.flags)
		}
	})
}
