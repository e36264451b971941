// Package storetest is the conformance suite every *storage.Store backend
// runs, in the manner of go-cloud's drivertest: a backend's test file calls
// RunConformance with a constructor, and the suite checks every rule of the
// design's "Semantics" and every contract written in package storage.
//
// The suite asserts error kinds with errors.Is on the storage sentinels,
// never message text, and compares protos with protocmp. Where the written
// contracts leave a case open, the suite pins it down and says so beside the
// test (for example: a Load offset beyond the session is an empty answer,
// not an error).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// Namespaces the suite uses. The invariant check that runs after every
// subtest lists exactly these, so tests must not use others.
const (
	nsDefault = ""
	nsA       = "ns-a"
	nsB       = "ns-b.other_1"
)

var namespaces = []string{nsDefault, nsA, nsB}

// Harness is how the suite makes a backend's stores, in the manner of
// go-cloud drivertest's HarnessMaker and MakeDriver: fresh data, and drivers
// opened, closed and opened again on it. The suite wraps every driver in the
// portable store (storage.New), as the daemon does.
type Harness struct {
	// NewData returns the address of fresh, empty data for a store (a
	// directory, a database) and registers on t the cleanup that removes
	// it; that cleanup runs after every store opened on it is closed.
	// Subtests run in parallel, so NewData may be called concurrently.
	NewData func(t *testing.T) string

	// Open opens the backend's store (with its default limits) on the
	// data at addr. The suite closes every store it opens, and opens addr
	// again after closing it: writes the store acknowledged must then be
	// there. When Shared is false, Open on data another open store holds
	// must fail with an error wrapping storage.ErrLocked.
	Open func(ctx context.Context, addr string) (*storage.Store, error)

	// Shared says that several drivers may be open on the same data at
	// once, each seeing the others' writes at once, with every rule (ids,
	// aliases, revisions, idempotent appends) holding across them, and a
	// watcher on one seeing, in order, the changes made through another
	// (PostgreSQL: many daemons on one database).
	Shared bool
}

// RunConformance runs the suite against stores made by h.
func RunConformance(t *testing.T, h Harness) {
	t.Helper()
	if h.NewData == nil || h.Open == nil {
		t.Fatal("storetest: Harness needs NewData and Open")
	}
	hh := &harness{h}
	groups := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"Create", testCreate},
		{"Get", testGet},
		{"Load", testLoad},
		{"Append", testAppend},
		{"Save", testSave},
		{"Update", testUpdate},
		{"Delete", testDelete},
		{"Fork", testFork},
		{"Rewind", testRewind},
		{"ExpectedRevision", testExpectedRevision},
		{"Names", testNames},
		{"InvalidUTF8", testInvalidUTF8},
		{"List", testList},
		{"Search", testSearch},
		{"Watch", testWatch},
		{"Fidelity", testFidelity},
		{"Tally", testTally},
		{"Titles", testTitles},
		{"Aliasing", testAliasing},
		{"Closed", testClosed},
		{"Reopen", testReopen},
		{"SecondOpen", testSecondOpen},
		{"Simulation", testSimulation},
		{"Compact", testCompact},
		{"Live", testLive},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			g.fn(t, hh)
		})
	}
}

type harness struct{ Harness }

// open returns a store on fresh data and registers a check, run before the
// store is closed, that the store's state is consistent.
func (h *harness) open(t *testing.T) *storage.Store {
	t.Helper()
	s := h.openUnchecked(t)
	t.Cleanup(func() { checkInvariants(t, s) })
	return s
}

// openUnchecked returns a store on fresh data, for tests that close it
// themselves.
func (h *harness) openUnchecked(t *testing.T) *storage.Store {
	t.Helper()
	s, err := h.openOn(t, h.NewData(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// openOn opens a store on the data at addr and registers its Close (which
// may already have happened) as a cleanup.
func (h *harness) openOn(t *testing.T, addr string) (*storage.Store, error) {
	t.Helper()
	s, err := h.Open(t.Context(), addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, nil
}

// openData opens a store on fresh data and returns it with the data's
// address, for tests that close it and open the data again (reopen).
func (h *harness) openData(t *testing.T) (*storage.Store, string) {
	t.Helper()
	addr := h.NewData(t)
	s, err := h.openOn(t, addr)
	must(t, "Open", err)
	return s, addr
}

// reopen closes s, opens its data at addr again, and checks that the new
// store shows every session as s did (what names the moment) and is
// consistent.
func (h *harness) reopen(t *testing.T, what string, s *storage.Store, addr string) *storage.Store {
	t.Helper()
	before := takeState(t, s)
	must(t, "Close", s.Close())
	s2, err := h.openOn(t, addr)
	must(t, "Open "+what, err)
	checkState(t, what, before, takeState(t, s2))
	checkInvariants(t, s2)
	return s2
}

// checkInvariants checks what must hold in every state of every store: the
// listing is in order, ids are canonical and unique across namespaces, every
// listed session answers Get and Load alike, its message count matches its
// messages, its messages have unique ids and a created_at, and its alias
// resolves to it. It runs in a cleanup, after t.Context() has ended.
func checkInvariants(t *testing.T, s *storage.Store) {
	t.Helper()
	if t.Failed() {
		return // the test's own failure says more
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := make(map[string]string) // id -> namespace
	for _, ns := range namespaces {
		var list []*storage.Session
		err := s.List(ctx, storage.ListOptions{Namespace: ns}, func(se *storage.Session) error {
			list = append(list, se)
			return nil
		})
		if err != nil {
			t.Errorf("invariants: List(%q): %v", ns, err)
			return
		}
		checkListOrder(t, "invariants: List("+ns+")", list)
		for _, se := range list {
			checkCanonicalID(t, "invariants: listed id", se.ID)
			if prev, dup := seen[se.ID]; dup {
				t.Errorf("invariants: id %s listed in namespaces %q and %q", se.ID, prev, ns)
			}
			seen[se.ID] = ns
			if se.Namespace != ns {
				t.Errorf("invariants: session %s listed in %q says namespace %q", se.ID, ns, se.Namespace)
			}
			ref := storage.Ref{Namespace: ns, ID: se.ID}
			got, err := s.Get(ctx, ref)
			if err != nil {
				t.Errorf("invariants: Get(%s) of a listed session: %v", se.ID, err)
				continue
			}
			if d := diffSession(se, got); d != "" {
				t.Errorf("invariants: listed and Get session %s differ (-listed +get):\n%s", se.ID, d)
			}
			loaded, msgs, err := s.Load(ctx, ref, storage.LoadOptions{})
			if err != nil {
				t.Errorf("invariants: Load(%s): %v", se.ID, err)
				continue
			}
			if d := diffSession(got, loaded); d != "" {
				t.Errorf("invariants: Get and Load session %s differ (-get +load):\n%s", se.ID, d)
			}
			if int64(len(msgs)) != loaded.MessageCount {
				t.Errorf("invariants: session %s has MessageCount %d but Load returned %d messages", se.ID, loaded.MessageCount, len(msgs))
			}
			if _, view, err := s.Load(ctx, ref, storage.LoadOptions{View: storage.ViewContext}); err != nil || int64(len(view)) != loaded.ContextMessageCount() {
				t.Errorf("invariants: session %s has ContextMessageCount %d but its context view holds %d messages (%v)", se.ID, loaded.ContextMessageCount(), len(view), err)
			}
			if want := storage.Recount(msgs); !loaded.Unknown && !storage.SameTally(loaded.Tally, want) {
				t.Errorf("invariants: session %s has tally %+v, but its messages say %+v", se.ID, loaded.Tally, want)
			}
			ids := make(map[string]bool)
			for i, m := range msgs {
				if m.GetId() == "" || ids[m.GetId()] {
					t.Errorf("invariants: session %s message %d has empty or repeated id %q", se.ID, i, m.GetId())
				}
				ids[m.GetId()] = true
				if m.GetCreatedAt() == nil {
					t.Errorf("invariants: session %s message %d has no created_at", se.ID, i)
				}
			}
			if se.Alias != "" {
				byAlias, err := s.Get(ctx, storage.Ref{Namespace: ns, Alias: se.Alias})
				if err != nil || byAlias.ID != se.ID {
					t.Errorf("invariants: alias %q of %s resolves to %v, %v", se.Alias, se.ID, byAlias, err)
				}
			}
		}
	}
}

// checkListOrder checks the list order: UpdatedAt newest first, then ID
// ascending, with no session twice.
func checkListOrder(t *testing.T, what string, list []*storage.Session) {
	t.Helper()
	for i := 1; i < len(list); i++ {
		a, b := list[i-1], list[i]
		if !listBefore(a, b) {
			t.Errorf("%s: %s (updated %v) listed before %s (updated %v): want updated_at newest first, then id",
				what, a.ID, a.UpdatedAt.Format(time.RFC3339Nano), b.ID, b.UpdatedAt.Format(time.RFC3339Nano))
		}
	}
}

// listBefore reports whether a comes strictly before b in list order.
func listBefore(a, b *storage.Session) bool {
	if !a.UpdatedAt.Equal(b.UpdatedAt) {
		return a.UpdatedAt.After(b.UpdatedAt)
	}
	return a.ID < b.ID
}

// sessionOpts compares storage.Session values: nil and empty maps are equal
// (a backend may answer either for "no metadata").
var sessionOpts = []cmp.Option{cmpopts.EquateEmpty(), protocmp.Transform()}

func diffSession(want, got *storage.Session) string {
	return cmp.Diff(want, got, sessionOpts...)
}

// checkCanonicalID checks that id is a UUID in lowercase canonical form.
func checkCanonicalID(t *testing.T, what, id string) {
	t.Helper()
	u, err := uuid.Parse(id)
	if err != nil || u.String() != id {
		t.Errorf("%s %q is not a lowercase canonical UUID", what, id)
	}
}

// checkNewID checks that a server-made session id is a canonical UUIDv7.
func checkNewID(t *testing.T, what, id string) {
	t.Helper()
	checkCanonicalID(t, what, id)
	if u, err := uuid.Parse(id); err == nil && u.Version() != 7 {
		t.Errorf("%s %q is a version %d UUID, want version 7", what, id, u.Version())
	}
}

// wantErr fails unless err wraps target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want one wrapping %q", what, err, target)
	}
}

// must fails the test now if err is not nil.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// errOf is the error of a call whose result a check does not need.
func errOf[T any](_ T, err error) error { return err }

// timeSlack allows for backends that keep timestamps at microsecond or
// millisecond precision, and for clocks read a moment apart.
const timeSlack = 5 * time.Millisecond

// checkTimeBetween checks lo-slack <= got <= hi+slack.
func checkTimeBetween(t *testing.T, what string, got, lo, hi time.Time) {
	t.Helper()
	if got.Before(lo.Add(-timeSlack)) || got.After(hi.Add(timeSlack)) {
		t.Errorf("%s = %v, want between %v and %v", what, got, lo, hi)
	}
}

// msg returns a user message with the given id and content.
func msg(id, content string) *sessiondv1.Message {
	return &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_USER, Content: content}
}

// msgs returns n user messages with ids prefix-0, prefix-1, ...
func msgs(prefix string, n int) []*sessiondv1.Message {
	out := make([]*sessiondv1.Message, n)
	for i := range out {
		out[i] = msg(fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("content of %s-%d", prefix, i))
	}
	return out
}

// checkMessages compares stored messages with the ones sent: equal field for
// field (unknown fields included), except that a created_at the sender left
// out must have been filled in, and an id left out must have been filled in.
func checkMessages(t *testing.T, what string, got, sent []*sessiondv1.Message) {
	t.Helper()
	if len(got) != len(sent) {
		t.Errorf("%s: got %d messages, want %d\ngot ids %v\nwant ids %v", what, len(got), len(sent), ids(got), ids(sent))
		return
	}
	for i := range got {
		want := proto.Clone(sent[i]).(*sessiondv1.Message)
		if want.CreatedAt == nil {
			if got[i].GetCreatedAt() == nil {
				t.Errorf("%s: message %d: created_at was not filled in", what, i)
				continue
			}
			want.CreatedAt = got[i].GetCreatedAt()
		}
		if want.Id == "" {
			if got[i].GetId() == "" {
				t.Errorf("%s: message %d: id was not filled in", what, i)
				continue
			}
			want.Id = got[i].GetId()
		}
		if d := cmp.Diff(want, got[i], protocmp.Transform()); d != "" {
			t.Errorf("%s: message %d differs (-want +got):\n%s", what, i, d)
		}
	}
}

func ids(ms []*sessiondv1.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.GetId()
	}
	return out
}

// create makes a session or fails the test.
func create(t *testing.T, s *storage.Store, req storage.CreateRequest) *storage.Session {
	t.Helper()
	se, err := s.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("Create(%+v): %v", req, err)
	}
	return se
}

// createRef is create, also answering the new session's ref by id.
func createRef(t *testing.T, s *storage.Store, req storage.CreateRequest) (*storage.Session, storage.Ref) {
	t.Helper()
	se := create(t, s, req)
	return se, storage.Ref{Namespace: req.Namespace, ID: se.ID}
}

func get(t *testing.T, s *storage.Store, ref storage.Ref) *storage.Session {
	t.Helper()
	se, err := s.Get(t.Context(), ref)
	if err != nil {
		t.Fatalf("Get(%+v): %v", ref, err)
	}
	return se
}

// loadAll returns a session and all its messages or fails the test.
func loadAll(t *testing.T, s *storage.Store, ref storage.Ref) (*storage.Session, []*sessiondv1.Message) {
	t.Helper()
	se, ms, err := s.Load(t.Context(), ref, storage.LoadOptions{})
	if err != nil {
		t.Fatalf("Load(%+v): %v", ref, err)
	}
	return se, ms
}

func appendMsgs(t *testing.T, s *storage.Store, ref storage.Ref, ms ...*sessiondv1.Message) storage.AppendResult {
	t.Helper()
	res, err := s.Append(t.Context(), storage.AppendRequest{Ref: ref, Messages: ms})
	if err != nil {
		t.Fatalf("Append(%v, %v): %v", ref, ids(ms), err)
	}
	return res
}

// snapshot is a session's whole observable state, for "nothing changed".
type snapshot struct {
	session *storage.Session
	msgs    []*sessiondv1.Message
}

func takeSnapshot(t *testing.T, s *storage.Store, ref storage.Ref) snapshot {
	t.Helper()
	se, ms := loadAll(t, s, ref)
	return snapshot{se, ms}
}

// checkUnchanged fails if the session's state differs from before.
func checkUnchanged(t *testing.T, what string, s *storage.Store, ref storage.Ref, before snapshot) {
	t.Helper()
	after := takeSnapshot(t, s, ref)
	if d := diffSession(before.session, after.session); d != "" {
		t.Errorf("%s changed the session (-before +after):\n%s", what, d)
	}
	if d := cmp.Diff(before.msgs, after.msgs, protocmp.Transform(), cmpopts.EquateEmpty()); d != "" {
		t.Errorf("%s changed the messages (-before +after):\n%s", what, d)
	}
}

// listAll returns every session List yields for opts.
func listAll(t *testing.T, s *storage.Store, opts storage.ListOptions) []*storage.Session {
	t.Helper()
	var out []*storage.Session
	err := s.List(t.Context(), opts, func(se *storage.Session) error {
		out = append(out, se)
		return nil
	})
	if err != nil {
		t.Fatalf("List(%+v): %v", opts, err)
	}
	checkListOrder(t, fmt.Sprintf("List(%+v)", opts), out)
	return out
}

func sessionIDs(list []*storage.Session) []string {
	out := make([]string, len(list))
	for i, se := range list {
		out[i] = se.ID
	}
	return out
}

// sortedIDs returns ids sorted, for comparing sets.
func sortedIDs(ids ...string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// searchAll returns every hit Search yields for opts.
func searchAll(t *testing.T, s *storage.Store, opts storage.SearchOptions) []storage.SearchHit {
	t.Helper()
	var out []storage.SearchHit
	err := s.Search(t.Context(), opts, func(h storage.SearchHit) error {
		out = append(out, h)
		return nil
	})
	if err != nil {
		t.Fatalf("Search(%+v): %v", opts, err)
	}
	return out
}

// pause lets the clock move on, so that writes get distinct updated_at
// values even on a backend that keeps milliseconds.
func pause() { time.Sleep(3 * time.Millisecond) }

// containsFold reports whether s contains sub, ignoring case.
func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// cmpMsgs diffs two message lists exactly.
func cmpMsgs(want, got []*sessiondv1.Message) string {
	return cmp.Diff(want, got, protocmp.Transform(), cmpopts.EquateEmpty())
}
