package storage

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// Every subscriber of a session gets the one encoding of a published
// event; a replay from history is encoded afresh, since the history keeps
// no encoding.
func TestEventEncodedOncePerPublish(t *testing.T) {
	b := NewBroker()
	var subs []*Subscription
	for range 3 {
		s, err := b.Subscribe(testSession, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs = append(subs, s)
	}
	var calls atomic.Int64
	encode := func(e Event) ([]byte, error) {
		calls.Add(1)
		return fmt.Appendf(nil, "rev %d", e.Revision), nil
	}
	b.Publish(testSession, ev(EventAppended, 2))
	var first []byte
	for i, s := range subs {
		got, err := recv(t, s).Encoded(encode)
		if err != nil || string(got) != "rev 2" {
			t.Fatalf("subscriber %d: Encoded = %q, %v; want \"rev 2\"", i, got, err)
		}
		if i == 0 {
			first = got
		} else if &got[0] != &first[0] {
			t.Errorf("subscriber %d got its own copy of the encoding, not the shared one", i)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("encode ran %d times for one event and %d subscribers; want once", n, len(subs))
	}

	late, err := b.Subscribe(testSession, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	if got, err := recv(t, late).Encoded(encode); err != nil || string(got) != "rev 2" {
		t.Fatalf("replayed event: Encoded = %q, %v; want \"rev 2\"", got, err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("encode ran %d times after a replay; want 2 (the history keeps no encoding)", n)
	}
}
