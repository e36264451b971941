package storage

import "sync"

// sharedEncoding holds one published event's encoding for every subscriber
// that receives a copy of it.
type sharedEncoding struct {
	once sync.Once
	b    []byte
	err  error
}

// Encoded returns encode(e), computed once for all the copies of an event
// that Broker.Publish delivered: a server whose many watchers of a session
// send the same bytes keeps one encoding of each event, not one per
// watcher. For an event that did not come through Publish (a replay, one
// built by hand) it calls encode each time. encode must not change e, which
// is shared.
func (e Event) Encoded(encode func(Event) ([]byte, error)) ([]byte, error) {
	if e.encoding == nil {
		return encode(e)
	}
	e.encoding.once.Do(func() { e.encoding.b, e.encoding.err = encode(e) })
	return e.encoding.b, e.encoding.err
}
