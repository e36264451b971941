package file

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/storetest"
)

func TestConformance(t *testing.T) {
	storetest.RunConformance(t, storetest.Harness{
		NewData: func(t *testing.T) string {
			dir := t.TempDir()
			t.Cleanup(func() {
				if !t.Failed() {
					checkDir(t, dir)
				}
			})
			return dir
		},
		Open: func(ctx context.Context, dir string) (*storage.Store, error) {
			return Open(ctx, dir)
		},
		Shared: false, // one process holds a data dir
	})
}

// testStore is a file Store behind the portable layer, as the daemon runs
// it. The portable Store's methods win (they are the ones tests mean); the
// file Store's own methods and fields are promoted from one level deeper.
type testStore struct {
	*storage.Store
	driver
}

type driver struct{ *Store }

// portable wraps d as the daemon does.
func portable(d *Store) *testStore {
	return &testStore{Store: storage.New(d, storage.DefaultLimits()), driver: driver{d}}
}

// openStore opens a store on dir and registers a cleanup that closes it and
// checks what every state on disk must satisfy: no temp files left behind,
// and a reopened store that reads every session.
func openStore(t *testing.T, dir string, opts ...Option) *testStore {
	t.Helper()
	s, err := openDriver(t.Context(), dir, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if t.Failed() {
			return
		}
		checkDir(t, dir)
	})
	return portable(s)
}

// checkDir checks a closed data dir: no temp files, and Check finds nothing.
func checkDir(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && (strings.HasPrefix(d.Name(), tmpPref) || strings.HasPrefix(d.Name(), delPref)) {
			t.Errorf("leftover temp file %s", path)
		}
		return nil
	})
}

// openPortable opens dir and wraps the store as the daemon does.
func openPortable(ctx context.Context, dir string, opts ...Option) (*testStore, error) {
	d, err := openDriver(ctx, dir, opts...)
	if err != nil {
		return nil, err
	}
	return portable(d), nil
}

// testHooks returns s's test hooks, making them on first use. Set them
// before the writes they are to see start.
func (s *Store) testHooks() *testHooks {
	if s.hooks == nil {
		s.hooks = &testHooks{}
	}
	return s.hooks
}

// marshalMessages encodes ms, one encoding each, as a journal holds them.
func marshalMessages(ms []*sessiondv1.Message) ([][]byte, error) {
	out := make([][]byte, 0, len(ms))
	for _, m := range ms {
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}
