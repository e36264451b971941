package storage

import (
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// MaxNameBytes is the longest alias or namespace.
const MaxNameBytes = 128

// MaxMessageIDBytes is the longest message or tool-call id.
const MaxMessageIDBytes = 256

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
		return fmt.Errorf("alias %q is shaped like a UUID: %w", alias, ErrInvalid)
	}
	return nil
}

// validateName enforces the shared rule for aliases and namespaces: 1-128
// bytes of ASCII letters, digits, '.', '_', '-', and not "." or "..". The
// rule keeps names safe as file names and in URLs.
func validateName(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty: %w", field, ErrInvalid)
	}
	if len(s) > MaxNameBytes {
		return fmt.Errorf("%s is %d bytes, more than %d: %w", field, len(s), MaxNameBytes, ErrInvalid)
	}
	if s == "." || s == ".." {
		return fmt.Errorf("%s %q is not allowed: %w", field, s, ErrInvalid)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%s %q has byte %q at %d; use letters, digits, '.', '_', '-': %w", field, s, c, i, ErrInvalid)
		}
	}
	return nil
}

// ParseSessionID checks a session id and returns its canonical lowercase form.
func ParseSessionID(field, id string) (string, error) {
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return "", fmt.Errorf("%s %q is not a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx): %w", field, id, ErrInvalid)
	}
	return u.String(), nil
}

// ValidateMessageID checks a client-chosen message or tool-call id: 1-256
// bytes, no control characters.
func ValidateMessageID(field, id string) error {
	if id == "" {
		return fmt.Errorf("%s is empty: %w", field, ErrInvalid)
	}
	if len(id) > MaxMessageIDBytes {
		return fmt.Errorf("%s is %d bytes, more than %d: %w", field, len(id), MaxMessageIDBytes, ErrInvalid)
	}
	if i := strings.IndexFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
		return fmt.Errorf("%s has a control character at byte %d: %w", field, i, ErrInvalid)
	}
	return nil
}

// ValidateRef checks a reference and returns it with a canonical id.
func ValidateRef(ref Ref) (Ref, error) {
	if err := ValidateNamespace(ref.Namespace); err != nil {
		return ref, err
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
			return ref, fmt.Errorf("ref.%w", err)
		}
	default:
		return ref, fmt.Errorf("ref names no session: set ref.id or ref.alias: %w", ErrInvalid)
	}
	return ref, nil
}
