package auth

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Keeper holds the tokens of one token file and reloads them. Lookups never
// wait for a reload: they use the last good Set. It is safe for concurrent
// use.
//
// Reloading reads the whole file and compares its bytes with what was last
// read, rather than watching it with inotify (fsnotify): the file is small,
// and comparing contents sees every kind of change the same way — an editor
// or sessionctl replacing the file by rename (which ends an inotify watch on
// the old file), a Kubernetes secret swapping a symlink, a network file
// system that sends no events, or two writes within one mtime tick — with no
// dependency and no watch to re-arm.
type Keeper struct {
	path string
	set  atomic.Pointer[Set]

	mu   sync.Mutex // serialises reloads; guards last
	last []byte     // the bytes last read, good or bad
}

// NewKeeper reads the token file at path. A file that cannot be read or
// parsed is an error: the daemon must not start without the tokens it was
// told to use.
func NewKeeper(path string) (*Keeper, error) {
	data, s, err := readFile(path)
	if err != nil {
		return nil, err
	}
	k := &Keeper{path: path, last: data}
	k.set.Store(s)
	return k, nil
}

// Path returns the token file's path.
func (k *Keeper) Path() string { return k.path }

// Lookup finds the token of secret in the current tokens.
func (k *Keeper) Lookup(secret string) (Token, bool) {
	return k.set.Load().Lookup(secret)
}

// Current returns the tokens in use.
func (k *Keeper) Current() *Set { return k.set.Load() }

// Reload reads the file again. It returns the new Set when the tokens in use
// changed, nil when the file is as last read (unless force is set, as on
// SIGHUP, which parses it again anyway), and an error when the file cannot
// be read or parsed: then the tokens in use stay as they were. A broken file
// is reported once, not at every poll, until it changes again.
func (k *Keeper) Reload(force bool) (*Set, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	data, err := os.ReadFile(k.path)
	if err != nil {
		if !force && k.last == nil {
			return nil, nil // already reported
		}
		k.last = nil
		return nil, fmt.Errorf("auth: %w; keeping the %d tokens in use", err, k.set.Load().Len())
	}
	if !force && k.last != nil && bytes.Equal(data, k.last) {
		return nil, nil
	}
	k.last = data
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w; keeping the %d tokens in use", k.path, err, k.set.Load().Len())
	}
	k.set.Store(s)
	return s, nil
}

// PollInterval is how often the daemon looks at its token and certificate
// files for changes.
const PollInterval = time.Second
