package file

import (
	"context"
	"errors"
	"strings"

	"github.com/sessiond/sessiond/storage"
)

// Search calls yield for each hit, session by session in list order.
// Damaged sessions are skipped.
func (s *Store) Search(ctx context.Context, opts storage.SearchOptions, yield func(storage.SearchHit) error) error {
	q := strings.ToLower(opts.Query)
	var sessions []*storage.Session
	if err := s.List(ctx, storage.ListOptions{Namespace: opts.Namespace}, func(m *storage.Session) error {
		sessions = append(sessions, m)
		return nil
	}); err != nil {
		return err
	}
	hits := int64(0)
	emit := func(h storage.SearchHit) error {
		if opts.Limit > 0 && hits >= opts.Limit {
			return errStop
		}
		hits++
		return yield(h)
	}
	for _, m := range sessions {
		if err := ctx.Err(); err != nil {
			return err
		}
		v, err := s.readView(storage.Ref{Namespace: m.Namespace, ID: m.ID})
		if errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrDataLoss) {
			continue // deleted meanwhile, or damaged: skipped, as documented
		}
		if err != nil {
			return err
		}
		meta := cloneMeta(v.meta)
		for _, f := range []string{v.meta.GivenTitle(), v.meta.Alias, v.meta.Summary} {
			if snip, ok := storage.Snippet(f, q); ok {
				if err := emit(storage.SearchHit{Session: meta, MessageIndex: -1, Snippet: snip}); err != nil {
					return stopOK(err)
				}
				break
			}
		}
		for i, b := range v.all() {
			msg, err := unmarshalMessage(m.ID, b)
			if err != nil {
				break // damaged message: skip the rest of this session
			}
			for _, t := range storage.MessageTexts(msg) {
				if snip, ok := storage.Snippet(t, q); ok {
					if err := emit(storage.SearchHit{Session: cloneMeta(meta), MessageIndex: int64(i), Snippet: snip}); err != nil {
						return stopOK(err)
					}
					break
				}
			}
		}
	}
	return nil
}

var errStop = errors.New("search limit reached")

func stopOK(err error) error {
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}
