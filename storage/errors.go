package storage

import (
	"errors"
	"fmt"
)

// ErrTooLarge: a request is over one of the Limits; the error is a
// *LimitError naming the limit. Servers answer it RESOURCE_EXHAUSTED.
var ErrTooLarge = errors.New("request over a limit")

// FieldError is an invalid request field. It wraps ErrInvalid, so
// errors.Is(err, ErrInvalid) holds; errors.As finds the field without parsing
// text, for example to build a google.rpc.BadRequest field violation.
type FieldError struct {
	// Field is the request field's path, e.g. "messages[2].role" or
	// "header.ref.alias".
	Field string
	// Description says what is wrong, as the rest of a sentence that starts
	// with the field's name: "is unspecified", "is 300 bytes, more than 256".
	Description string
}

// Error returns the field's name followed by its description.
func (e *FieldError) Error() string { return e.Field + " " + e.Description }

// Unwrap makes a FieldError an ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// Invalid returns a *FieldError for field; format and args describe the fault.
func Invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Description: fmt.Sprintf(format, args...)}
}

// InField returns err with its field path under parent ("header" turns
// "ref.id" into "header.ref.id"). Errors other than *FieldError and
// *LimitError come back unchanged.
func InField(parent string, err error) error {
	if parent == "" {
		return err
	}
	return renameField(err, func(f string) string { return joinField(parent, f) })
}

// renameField returns a copy of the *FieldError or *LimitError in err's
// chain with its field path rewritten by rename; other errors come back
// unchanged.
func renameField(err error, rename func(string) string) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		c := *fe
		c.Field = rename(c.Field)
		return &c
	}
	var le *LimitError
	if errors.As(err, &le) {
		c := *le
		c.Field = rename(c.Field)
		return &c
	}
	return err
}

func joinField(parent, field string) string {
	if field == "" {
		return parent
	}
	if field[0] == '[' {
		return parent + field
	}
	return parent + "." + field
}

// LimitError is a request over one of the Limits. It wraps ErrTooLarge;
// errors.As finds the field and the limit without parsing text, for example
// to build a google.rpc.QuotaFailure or BadRequest detail.
type LimitError struct {
	// Field is the request field over the limit, e.g. "messages[0]" or
	// "metadata key \"k\"".
	Field string
	// Limit is the limit's name as ServerLimits spells it, e.g.
	// "max_message_bytes"; it is also the daemon's flag name with dashes.
	Limit string
	// Size is the field's size and Max the limit, in the limit's unit (bytes,
	// or entries for max_map_entries).
	Size, Max int64
}

// Error names the field, its size and the limit.
func (e *LimitError) Error() string {
	if e.Limit == "max_map_entries" {
		return fmt.Sprintf("%s has %d entries, over the %s limit of %d", e.Field, e.Size, e.Limit, e.Max)
	}
	return fmt.Sprintf("%s is %d bytes, over the %s limit of %d", e.Field, e.Size, e.Limit, e.Max)
}

// Unwrap makes a LimitError an ErrTooLarge.
func (e *LimitError) Unwrap() error { return ErrTooLarge }

// ErrorField returns the request field a *FieldError or *LimitError in err's
// chain names.
func ErrorField(err error) (string, bool) {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Field, true
	}
	var le *LimitError
	if errors.As(err, &le) {
		return le.Field, true
	}
	return "", false
}
