package server

import (
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sessiond/sessiond/gen/msgcheck"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// The request rules live in package storage, which checks every request
// once. The server checks only what storage cannot see: the encoded frame's
// size, fields that are absent (storage has no "unset"), timestamps and page
// tokens before they become Go values, update-mask paths, and the shape of a
// SaveSession stream. Its errors are storage's (*storage.FieldError,
// *storage.LimitError), so they go through the same toStatus mapping.

// refArg converts a request's ref (field names it, e.g. "ref" or
// "header.ref"), which must be present; the store checks the rest.
func refArg(field string, r *sessiondv1.SessionRef) (storage.Ref, error) {
	if r == nil {
		return storage.Ref{}, storage.Invalid(field, "is required")
	}
	return refFromProto(r), nil
}

func validTimestamp(field string, ts *timestamppb.Timestamp) error {
	if ts == nil {
		return nil
	}
	if err := ts.CheckValid(); err != nil {
		return storage.Invalid(field, "is not a valid time: %v", err)
	}
	return nil
}

// validDuration checks a duration before it becomes a Go value: unset, or
// a valid protobuf Duration within time.Duration's range (the store checks
// the bounds that matter).
func validDuration(field string, d *durationpb.Duration) error {
	if d == nil {
		return nil
	}
	if err := d.CheckValid(); err != nil {
		return storage.Invalid(field, "is not a valid duration: %v", err)
	}
	if d.GetSeconds() < 0 || d.GetNanos() < 0 {
		return storage.Invalid(field, "is negative")
	}
	if d.AsDuration() == time.Duration(math.MaxInt64) {
		return storage.Invalid(field, "is longer than %v", storage.MaxExpireAfter)
	}
	return nil
}

// maskFields turns update_mask paths into storage fields. An empty mask is
// refused (storage.CheckUpdateFields): with proto3 zero values, "update
// nothing" and "clear everything" would otherwise be a client bug away from
// each other.
func maskFields(paths []string) (storage.UpdateField, error) {
	var fields storage.UpdateField
	for i, p := range paths {
		f, ok := updateFields[p]
		if !ok {
			return 0, storage.Invalid(fmt.Sprintf("update_mask.paths[%d]", i), "%q is not one of alias, title, summary, metadata, labels, expire_after", msgcheck.Clip(p))
		}
		fields |= f
	}
	return fields, storage.CheckUpdateFields(fields)
}

// underParent moves the fields storage names for a request whose proto puts
// some of them under a parent message: an UpdateSession's session fields
// ("title" is "session.title"), a SaveSession's header fields ("ref.id" is
// "header.ref.id"). moved says which top-level storage fields move.
func underParent(parent string, moved func(top string) bool, err error) error {
	f, ok := storage.ErrorField(err)
	if !ok {
		return err
	}
	top := f
	if i := strings.IndexAny(f, ".[ "); i >= 0 {
		top = f[:i]
	}
	if !moved(top) {
		return err
	}
	return storage.InField(parent, err)
}

// sessionField reports the storage fields an UpdateSession carries in its
// session message.
func sessionField(top string) bool {
	switch top {
	case "alias", "title", "summary", "metadata", "labels", "expire_after":
		return true
	}
	return false
}

// headerField reports the storage fields a SaveSession carries in its
// header: all but the messages.
func headerField(top string) bool { return top != "messages" }
