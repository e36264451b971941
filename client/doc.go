// Package client is the Go SDK of sessiond: a thin, typed wrapper of every
// SessionStoreService RPC, and a Handle that keeps one conversation and saves
// it for you.
//
//	c, err := client.Dial(ctx, "127.0.0.1:7437") // or "unix:///run/sessiond.sock"
//	h, err := c.OpenOrCreate(ctx, client.Alias("my-project"), client.WithAutoSave(5*time.Minute))
//	err = h.Append(client.UserText("2+2?"), client.AssistantText("4", client.WithModel("gpt-4.1")))
//	err = h.Save(ctx)  // sends only what is new
//	err = h.Close(ctx) // stops auto-save, saves what is left
//	fmt.Println("resume with", h.ID())
//
// UserText, AssistantText, ToolCall and ToolResult make the everyday
// messages; Append takes any *sessiondv1.Message.
//
// The SDK is a module of its own (github.com/sessiond/sessiond/client): it
// needs gRPC, protobuf and the generated API module
// (github.com/sessiond/sessiond/gen), never the daemon's dependencies.
//
// # Saving
//
// A Handle appends in memory. Save sends a changed summary or metadata with
// UpdateSession and the messages the daemon does not have with
// AppendMessages, each guarded by the revision the handle last saw. The SDK
// gives every message an id, and the daemon stores only the messages of a
// batch it does not hold yet, so a save retried after a timeout or a lost
// connection resends the batch whose answer it missed, which stores nothing
// twice and succeeds even at a stale revision, and then what was appended
// since. No turn is ever duplicated.
//
// Auto-save (WithAutoSave, WithIdleSave) runs on its own goroutine, skips a
// clean handle, retries a few times with exponential backoff and jitter
// (github.com/cenkalti/backoff), and reports failures to WithErrorHandler.
// Close stops it, then saves with retries until its ctx ends. While the
// daemon is down, unsaved messages stay in the handle; the first save after
// it is back sends them once.
//
// # Spooling
//
// With WithSpool(dir), the handle also keeps what is unsaved in a spool file
// in dir (checksummed, fsync'd, replaced atomically on every change, removed
// once saved), so a program that quits or crashes while the daemon is down
// loses nothing: the next Open of the session with the same dir sends the
// spooled messages before it returns, leaving out those the daemon already
// holds. A damaged spool file is never sent and never deleted: Open renames
// it aside and fails with ErrSpool, naming it.
//
// The spool file format, which the Python SDK (clients/python) writes and
// reads too, so that either may resume what the other spooled:
//
//	magic   8 bytes  "SDSPOOL1"
//	length  uint32   little-endian, of the payload
//	crc     uint32   little-endian, CRC-32C (Castagnoli) of the payload
//	payload          protobuf wire fields:
//	                   1 (bytes)  a sessiond.v1.Session: id, namespace,
//	                              revision, summary, metadata and the
//	                              unsaved messages, each with its id
//	                   2 (varint) flags: 1 the messages replace the stored
//	                              ones (never written; such a file is kept
//	                              aside as "<file>.conflict"), 2 the summary
//	                              is unsaved, 4 the metadata is unsaved
//
// Unknown payload fields are skipped. A file is written whole to a temporary
// name in the spool folder, fsync'd, renamed over the handle's file and the
// folder fsync'd, so a reader finds the previous version or the new one,
// never a mix. Files are named
// "<session id>.ns-<namespace in hex>.<handle id>.spool" (one per handle, so
// two programs on one session never overwrite each other's) and made 0600 in
// a 0700 folder.
//
// # Logging
//
// WithLogger takes a *slog.Logger (the default discards): retries at Debug,
// auto-save failures that no WithErrorHandler takes and spool problems at
// Warn.
//
// # Conflicts
//
// Two writers on one session: the one that saves second gets ErrConflict
// (auto-save stops and reports it). Reload fetches the stored messages and
// puts the handle's unsaved ones after them; the next Save appends them.
//
// # Tool calls left open
//
// The daemon refuses a ROLE_TOOL result that answers no open tool call, and
// so does Handle.Append, at once (ErrInvalid). A program that stopped
// between a tool call and its result resumes with a valid history anyway:
// Open, Reload and Fork load with LoadOptions.CloseOpenToolCalls, and the
// synthetic results (metadata "sessiond.synthetic": "true") become local
// entries that Messages shows and saves never send. OpenToolCalls lists the
// calls still open; a real result appended for one replaces its synthetic
// result.
//
// # Errors
//
// Errors wrap a sentinel (ErrNotFound, ErrAliasInUse, ErrMessageConflict,
// ErrConflict, ErrInvalid, ErrTooLarge, ErrDataLoss, ErrWatchReset,
// ErrUnavailable, ErrUnauthenticated, ErrPermissionDenied, ErrClosed, and
// ErrSpool), chosen per RPC from the gRPC code, and the original gRPC status, which
// status.FromError still finds.
//
// # Tokens and TLS
//
// For a daemon started with --auth-tokens, WithToken sends the secret that
// `sessionctl token add` printed (without it, Dial reads SESSIOND_TOKEN).
// WithTLS or WithTLSFiles connect to a daemon serving TLS; WithTLSFiles also
// takes a client certificate for mutual TLS. Dial refuses to send a token
// without TLS to an address that is not loopback or a unix socket.
//
// # Other tools' formats
//
// Handle.Export writes the conversation as an OpenAI Chat Completions,
// OpenAI Responses or Anthropic Messages request body (package convert does
// the mapping, and says what a format cannot hold), so a loaded session
// goes to a model in one line:
//
//	body, warnings, err := h.Export(convert.OpenAIChat, convert.ExportOptions{Model: "gpt-4.1"})
//
// # Concurrency
//
// Client and Handle are safe for concurrent use.
package client
