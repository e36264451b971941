package server

import (
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// Validation errors wrap storage.ErrInvalid (INVALID_ARGUMENT) or
// errTooLarge (RESOURCE_EXHAUSTED) and name the request field, so that they
// go through the same toStatus mapping as storage's own errors.

// validRef checks a request's ref (field names it, e.g. "ref" or
// "header.ref") and returns it with the id in canonical form.
func validRef(field string, r *sessiondv1.SessionRef) (storage.Ref, error) {
	if r == nil {
		return storage.Ref{}, fmt.Errorf("%s is required: %w", field, storage.ErrInvalid)
	}
	ref, err := storage.ValidateRef(refFromProto(r))
	if err != nil && field != "ref" {
		// storage names the fields "ref.namespace", "ref.id", "ref.alias";
		// say which ref.
		err = fmt.Errorf("%s: %w", field, err)
	}
	return ref, err
}

// validOptionalAlias checks an alias that may be empty (no alias).
func validOptionalAlias(field, alias string) error {
	if alias == "" {
		return nil
	}
	err := storage.ValidateAlias(alias)
	if err != nil && field != "alias" {
		err = fmt.Errorf("%s: %w", field, err)
	}
	return err
}

func validTimestamp(field string, ts *timestamppb.Timestamp) error {
	if ts == nil {
		return nil
	}
	if err := ts.CheckValid(); err != nil {
		return fmt.Errorf("%s: %v: %w", field, err, storage.ErrInvalid)
	}
	return nil
}

func notNegative(field string, v int64) error {
	if v < 0 {
		return fmt.Errorf("%s is %d; it must not be negative: %w", field, v, storage.ErrInvalid)
	}
	return nil
}

// validAliasPrefix allows any prefix of a valid alias: the alias characters,
// at most MaxNameBytes.
func validAliasPrefix(p string) error {
	if len(p) > storage.MaxNameBytes {
		return fmt.Errorf("alias_prefix is %d bytes, more than %d: %w", len(p), storage.MaxNameBytes, storage.ErrInvalid)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("alias_prefix has byte %q at %d, which no alias holds: %w", c, i, storage.ErrInvalid)
		}
	}
	return nil
}

// maskFields turns update_mask paths into storage fields. An empty mask is
// refused: with proto3 zero values, "update nothing" and "clear everything"
// would otherwise be a client bug away from each other.
func maskFields(paths []string) (storage.UpdateField, error) {
	if len(paths) == 0 {
		return 0, fmt.Errorf("update_mask is empty; name at least one of alias, title, summary, metadata, labels: %w", storage.ErrInvalid)
	}
	var fields storage.UpdateField
	for i, p := range paths {
		f, ok := updateFields[p]
		if !ok {
			return 0, fmt.Errorf("update_mask.paths[%d] %q is not one of alias, title, summary, metadata, labels: %w", i, clip(p), storage.ErrInvalid)
		}
		fields |= f
	}
	return fields, nil
}

// validSessionFields checks the session-level fields that every write
// carrying them shares; prefix names their parent ("" or "session.").
func (l Limits) validSessionFields(prefix, title, summary string, metadata, labels map[string]string) error {
	if err := l.checkTitle(prefix+"title", title); err != nil {
		return err
	}
	if err := l.checkSummary(prefix+"summary", summary); err != nil {
		return err
	}
	if err := l.checkMap(prefix+"metadata", metadata); err != nil {
		return err
	}
	return l.checkMap(prefix+"labels", labels)
}

func validQuery(q string) error {
	if q == "" {
		return fmt.Errorf("query is empty: %w", storage.ErrInvalid)
	}
	return nil
}
