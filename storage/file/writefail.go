package file

import (
	"errors"
	"fmt"

	"github.com/sessiond/sessiond/storage"
)

// ErrIO is the store's error when the data dir's disk fails a read or
// write (EIO), or a write fails for a reason the store cannot name. It
// wraps storage.ErrUnavailable: the session keeps its last acknowledged
// state, and the call may succeed once the disk is repaired.
var ErrIO = fmt.Errorf("file: the data dir's disk failed a read or write (the kernel log says why): %w", storage.ErrUnavailable)

// writeFailed classifies a failed write's error for clients: a full disk
// stays storage.ErrNoSpace and a closed store storage.ErrClosed; every
// other failure is storage.ErrUnavailable (ErrIO unless it already is),
// never an error a server would answer INTERNAL.
func writeFailed(err error) error {
	if errors.Is(err, storage.ErrNoSpace) || errors.Is(err, storage.ErrUnavailable) || errors.Is(err, storage.ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrIO, err)
}
