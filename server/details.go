package server

import (
	"errors"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/sessiond/sessiond/storage"
)

// Error details. INVALID_ARGUMENT and RESOURCE_EXHAUSTED answers carry, besides
// their text, the standard google.rpc details every gRPC language reads
// without parsing text (grpc-status-details-bin):
//
//   - a google.rpc.BadRequest with one field violation: the request field
//     as the message names it ("ref.alias", "messages[2].role",
//     "metadata[\"k\"]") and what is wrong with it;
//   - a google.rpc.ErrorInfo with domain ErrorDomain and a stable reason, one
//     of the Reason constants, whose metadata repeats the field and, for a
//     limit, its name ("limit": "max_title_bytes"), "size" and "max".
//
// A full disk (RESOURCE_EXHAUSTED without a field) carries the ErrorInfo
// alone, reason ReasonStorageFull; so does a call over a limit of calls in
// progress, reason ReasonTooManyCalls.

// ErrorDomain is the ErrorInfo domain of sessiond's errors.
const ErrorDomain = "sessiond"

// ErrorInfo reasons. They are part of the API: clients may switch on them.
const (
	// ReasonInvalidField: INVALID_ARGUMENT, a request field is invalid.
	ReasonInvalidField = "INVALID_FIELD"
	// ReasonOverLimit: RESOURCE_EXHAUSTED, a request field is over one of
	// the daemon's limits (GetServerInfo reports them).
	ReasonOverLimit = "OVER_LIMIT"
	// ReasonStorageFull: RESOURCE_EXHAUSTED, the daemon's storage is full.
	ReasonStorageFull = "STORAGE_FULL"
	// ReasonTooManyCalls: RESOURCE_EXHAUSTED, the daemon serves as many
	// calls of this kind as it allows at once; metadata names the limit
	// ("limit": "max_concurrent_loads") and "max". Retry later.
	ReasonTooManyCalls = "TOO_MANY_CALLS"
)

// errorDetails returns the details for an error from storage or
// validation; none for errors that are neither invalid nor over a limit.
func errorDetails(err error) []protoadapt.MessageV1 {
	var fe *storage.FieldError
	var le *storage.LimitError
	switch {
	case errors.As(err, &fe):
		return []protoadapt.MessageV1{
			badRequest(fe.Field, fe.Description),
			errorInfo(ReasonInvalidField, map[string]string{"field": fe.Field}),
		}
	case errors.As(err, &le):
		return []protoadapt.MessageV1{
			badRequest(le.Field, strings.TrimPrefix(le.Error(), le.Field+" ")),
			errorInfo(ReasonOverLimit, map[string]string{
				"field": le.Field,
				"limit": le.Limit,
				"size":  strconv.FormatInt(le.Size, 10),
				"max":   strconv.FormatInt(le.Max, 10),
			}),
		}
	case errors.Is(err, storage.ErrNoSpace):
		return []protoadapt.MessageV1{errorInfo(ReasonStorageFull, nil)}
	}
	return nil
}

func badRequest(field, description string) *errdetails.BadRequest {
	return &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: field, Description: description},
	}}
}

func errorInfo(reason string, metadata map[string]string) *errdetails.ErrorInfo {
	return &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: metadata}
}

// withDetails adds err's details to st. Details that cannot be encoded
// (they always can) leave st as it is: the text alone still answers.
func withDetails(st *status.Status, err error) *status.Status {
	d := errorDetails(err)
	if len(d) == 0 {
		return st
	}
	if withD, derr := st.WithDetails(d...); derr == nil {
		return withD
	}
	return st
}
