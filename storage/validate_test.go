package storage

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestValidateAlias(t *testing.T) {
	for _, c := range []struct {
		alias string
		ok    bool
	}{
		{"a", true},
		{"my-project", true},
		{"My_Project.v2", true},
		{"..a", true},
		{"a..", true},
		{"-", true},
		{"_", true},
		{strings.Repeat("a", MaxNameBytes), true},
		{"0190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7", true},   // one hex digit short of a UUID
		{"0190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7bz", true}, // longer than a UUID
		{"g190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7b", true},  // not hex
		{"0190b5a4_7f2e_7c3d_8a1b_2c3d4e5f6a7b", true},  // underscores instead of dashes
		{"", false},
		{".", false},
		{"..", false},
		{strings.Repeat("a", MaxNameBytes+1), false},
		{"a/b", false},
		{"/", false},
		{"a\\b", false},
		{"a\x00b", false},
		{"a b", false},
		{"a\nb", false},
		{"é", false},
		{"a:b", false},
		{"0190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7b", false}, // a UUID
		{"0190B5A4-7F2E-7C3D-8A1B-2C3D4E5F6A7B", false}, // a UUID in capitals
		{"00000000-0000-0000-0000-000000000000", false}, // the nil UUID
		{"0190b5a47f2e7c3d8a1b2c3d4e5f6a7b", false},     // a UUID without dashes
	} {
		err := ValidateAlias(c.alias)
		if c.ok && err != nil {
			t.Errorf("ValidateAlias(%q) = %v, want nil", c.alias, err)
		}
		if !c.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateAlias(%q) = %v, want ErrInvalid", c.alias, err)
		}
	}
}

func TestValidateNamespace(t *testing.T) {
	for _, c := range []struct {
		ns string
		ok bool
	}{
		{"", true}, // the default namespace
		{"team-a", true},
		{"0190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7b", true}, // namespaces may look like UUIDs
		{strings.Repeat("n", MaxNameBytes), true},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"a\x00", false},
		{" ", false},
		{strings.Repeat("n", MaxNameBytes+1), false},
	} {
		err := ValidateNamespace(c.ns)
		if c.ok && err != nil {
			t.Errorf("ValidateNamespace(%q) = %v, want nil", c.ns, err)
		}
		if !c.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateNamespace(%q) = %v, want ErrInvalid", c.ns, err)
		}
	}
}

func TestParseSessionID(t *testing.T) {
	const canon = "0190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7b"
	for _, c := range []struct {
		id, want string
	}{
		{canon, canon},
		{strings.ToUpper(canon), canon},
		{"0190B5a4-7f2E-7c3d-8a1b-2c3d4e5f6A7b", canon},
		{"", ""},
		{"not-a-uuid", ""},
		{"0190b5a47f2e7c3d8a1b2c3d4e5f6a7b", ""},         // no dashes
		{"{" + canon + "}", ""},                          // braces
		{"urn:uuid:" + canon, ""},                        // URN
		{canon + " ", ""},                                // trailing space
		{"0190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7g", ""},     // not hex
		{"0190b5a4+7f2e-7c3d-8a1b-2c3d4e5f6a7b", ""},     // wrong separator
		{"../../0190b5a4-7f2e-7c3d-8a1b-2c3d4e", ""},     // path-like, 36 bytes
		{"0190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7b\x00", ""}, // NUL
	} {
		got, err := ParseSessionID("id", c.id)
		if c.want == "" {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseSessionID(%q) = %q, %v; want ErrInvalid", c.id, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseSessionID(%q) = %q, %v; want %q", c.id, got, err, c.want)
		}
	}
}

func TestValidateMessageID(t *testing.T) {
	for _, c := range []struct {
		id string
		ok bool
	}{
		{"a", true},
		{"msg_01", true},
		{"with spaces / slashes \\ and \"quotes\"", true},
		{"ünïcødé-🎉", true},
		{strings.Repeat("x", MaxMessageIDBytes), true},
		{"", false},
		{strings.Repeat("x", MaxMessageIDBytes+1), false},
		{"a\x00", false},
		{"a\nb", false},
		{"tab\t", false},
		{"del\x7f", false},
		{"c1\u0085control", false}, // NEL, a C1 control character
		{"c1\u009f", false},
		{"bad utf-8 \xff", false}, // cannot be encoded as a proto string
	} {
		err := ValidateMessageID("id", c.id)
		if c.ok && err != nil {
			t.Errorf("ValidateMessageID(%q) = %v, want nil", c.id, err)
		}
		if !c.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateMessageID(%q) = %v, want ErrInvalid", c.id, err)
		}
	}
}

func TestValidateRef(t *testing.T) {
	id := uuid.Must(uuid.NewV7()).String()
	for _, c := range []struct {
		name string
		ref  Ref
		want Ref // zero: want ErrInvalid
	}{
		{"id", Ref{ID: id}, Ref{ID: id}},
		{"upper-case id", Ref{Namespace: "ns", ID: strings.ToUpper(id)}, Ref{Namespace: "ns", ID: id}},
		{"id wins over alias", Ref{ID: id, Alias: "a"}, Ref{ID: id}},
		{"alias", Ref{Namespace: "ns", Alias: "a"}, Ref{Namespace: "ns", Alias: "a"}},
		{"nothing", Ref{Namespace: "ns"}, Ref{}},
		{"bad id", Ref{ID: "x"}, Ref{}},
		{"bad alias", Ref{Alias: "a/b"}, Ref{}},
		{"uuid alias", Ref{Alias: id}, Ref{}},
		{"bad namespace", Ref{Namespace: "..", ID: id}, Ref{}},
	} {
		got, err := ValidateRef(c.ref)
		if c.want == (Ref{}) {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: ValidateRef(%+v) = %+v, %v; want ErrInvalid", c.name, c.ref, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: ValidateRef(%+v) = %+v, %v; want %+v", c.name, c.ref, got, err, c.want)
		}
	}
}

func TestValidateText(t *testing.T) {
	for _, c := range []struct {
		s  string
		ok bool
	}{
		{"", true}, {"plain", true}, {"ünïcødé 🎉 with \x00 NUL", true}, {"\xff", false}, {"a\xc3", false},
	} {
		err := ValidateText("title", c.s)
		if c.ok != (err == nil) || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateText(%q) = %v, want ok %v", c.s, err, c.ok)
		}
		err = ValidateStringMap("labels", map[string]string{"k": c.s})
		if c.ok != (err == nil) || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateStringMap(value %q) = %v, want ok %v", c.s, err, c.ok)
		}
		err = ValidateStringMap("labels", map[string]string{c.s: "v"})
		if c.ok != (err == nil) || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateStringMap(key %q) = %v, want ok %v", c.s, err, c.ok)
		}
	}
	if err := ValidateStringMap("metadata", nil); err != nil {
		t.Errorf("ValidateStringMap(nil) = %v", err)
	}
}

// checkNameProperties checks what every accepted alias or namespace must
// satisfy, whatever the validator's details: safe as a file name and in a URL
// path segment.
func checkNameProperties(t *testing.T, s string) {
	t.Helper()
	if s == "" || len(s) > MaxNameBytes {
		t.Errorf("accepted name of %d bytes", len(s))
	}
	if s == "." || s == ".." {
		t.Errorf("accepted %q", s)
	}
	if strings.ContainsAny(s, "/\\\x00") {
		t.Errorf("accepted %q, which holds a path separator or NUL", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			t.Errorf("accepted %q, which holds byte %#x", s, s[i])
		}
	}
}

func nameSeeds(f *testing.F) {
	for _, s := range []string{"", "a", ".", "..", "a/b", "a\x00b", "my-project", "0190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7b",
		"0190b5a47f2e7c3d8a1b2c3d4e5f6a7b", "{0190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7b}", "urn:uuid:0190b5a4-7f2e-7c3d-8a1b-2c3d4e5f6a7b",
		strings.Repeat("a", 128), strings.Repeat("a", 129), "é", "A.b_c-D"} {
		f.Add(s)
	}
}

func FuzzValidateAlias(f *testing.F) {
	nameSeeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		if err := ValidateAlias(s); err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ValidateAlias(%q) = %v, not ErrInvalid", s, err)
			}
			return
		}
		checkNameProperties(t, s)
		if _, err := uuid.Parse(s); err == nil {
			t.Errorf("accepted alias %q parses as a UUID", s)
		}
		if _, err := ParseSessionID("id", s); err == nil {
			t.Errorf("accepted alias %q is a session id", s)
		}
		if _, err := ValidateRef(Ref{Alias: s}); err != nil {
			t.Errorf("ValidateRef refuses accepted alias %q: %v", s, err)
		}
	})
}

func FuzzValidateNamespace(f *testing.F) {
	nameSeeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		if err := ValidateNamespace(s); err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ValidateNamespace(%q) = %v, not ErrInvalid", s, err)
			}
			return
		}
		if s == "" {
			return // the default namespace
		}
		checkNameProperties(t, s)
	})
}

func FuzzParseSessionID(f *testing.F) {
	nameSeeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseSessionID("id", s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseSessionID(%q) = %v, not ErrInvalid", s, err)
			}
			return
		}
		// Canonical: lowercase, 36 bytes, stable, and never a valid alias.
		if len(id) != 36 || strings.ToLower(id) != id || !strings.EqualFold(id, s) {
			t.Errorf("ParseSessionID(%q) = %q, not its canonical form", s, id)
		}
		if again, err := ParseSessionID("id", id); err != nil || again != id {
			t.Errorf("canonical id %q does not parse to itself: %q, %v", id, again, err)
		}
		if ValidateAlias(s) == nil {
			t.Errorf("session id %q is also a valid alias", s)
		}
	})
}
