package storage

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/gen/msgcheck"
)

// MaxNameBytes is the longest alias or namespace.
const MaxNameBytes = 128

// MaxMessageIDBytes is the longest message or tool-call id.
const MaxMessageIDBytes = msgcheck.MaxIDBytes

// ValidateNamespace checks a namespace: "" (the default) or a name.
func ValidateNamespace(ns string) error {
	if ns == "" {
		return nil
	}
	return validateName("namespace", ns)
}

// ValidateAlias checks a non-empty alias: a name that is not shaped like a
// UUID, so that a session argument is never ambiguous.
func ValidateAlias(alias string) error {
	if err := validateName("alias", alias); err != nil {
		return err
	}
	if _, err := uuid.Parse(alias); err == nil {
		return Invalid("alias", "%q is shaped like a UUID", alias)
	}
	return nil
}

// validateName enforces the shared rule for aliases and namespaces: 1-128
// bytes of ASCII letters, digits, '.', '_', '-', and not "." or "..". The
// rule keeps names safe as file names and in URLs.
func validateName(field, s string) error {
	if s == "" {
		return Invalid(field, "is empty")
	}
	if len(s) > MaxNameBytes {
		return Invalid(field, "is %d bytes, more than %d", len(s), MaxNameBytes)
	}
	if s == "." || s == ".." {
		return Invalid(field, "%q is not allowed", s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !nameByte(c) {
			return Invalid(field, "%q has byte %q at %d; use letters, digits, '.', '_', '-'", s, c, i)
		}
	}
	return nil
}

// ParseSessionID checks a session id and returns its canonical lowercase form.
func ParseSessionID(field, id string) (string, error) {
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return "", Invalid(field, "%q is not a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", id)
	}
	if !strings.ContainsFunc(id, unicode.IsUpper) {
		return id, nil // canonical already (36 bytes: no other form parses)
	}
	return u.String(), nil
}

// ValidateMessageID checks a client-chosen message or tool-call id: 1-256
// bytes of UTF-8, no control characters (C0, DEL or C1).
func ValidateMessageID(field, id string) error { return fromFault(msgcheck.ID(field, id)) }

// ValidateRef checks a reference and returns it with a canonical id.
func ValidateRef(ref Ref) (Ref, error) {
	if err := ValidateNamespace(ref.Namespace); err != nil {
		return ref, InField("ref", err)
	}
	switch {
	case ref.ID != "":
		id, err := ParseSessionID("ref.id", ref.ID)
		if err != nil {
			return ref, err
		}
		ref.ID, ref.Alias = id, ""
	case ref.Alias != "":
		if err := ValidateAlias(ref.Alias); err != nil {
			return ref, InField("ref", err)
		}
	default:
		return ref, Invalid("ref", "names no session: set ref.id or ref.alias")
	}
	return ref, nil
}

// ValidateText checks a session's free-text field (title, summary): it must
// be valid UTF-8, as every protobuf string must, or it could be neither
// stored as protobuf nor sent to a client.
func ValidateText(field, s string) error {
	if !utf8.ValidString(s) {
		return Invalid(field, "is not valid UTF-8")
	}
	return nil
}

// ValidateStringMap checks metadata or labels: keys and values valid UTF-8.
func ValidateStringMap(field string, m map[string]string) error {
	for k, v := range m {
		if !utf8.ValidString(k) {
			return Invalid(field, "has a key that is not valid UTF-8")
		}
		if !utf8.ValidString(v) {
			return Invalid(fmt.Sprintf("%s[%q]", field, msgcheck.Clip(k)), "is not valid UTF-8")
		}
	}
	return nil
}
