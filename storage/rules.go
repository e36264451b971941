package storage

import (
	"maps"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// StoredAtFunc returns the session's stored message at index i (decoding it
// if the backend keeps it encoded; a message that does not decode is
// ErrDataLoss).
type StoredAtFunc func(i int) (*sessiondv1.Message, error)

// SameCreate reports whether req, a create naming the id of the existing
// session cur, is an exact retry of the create that made cur: same
// namespace, still at its starting revision (req.Revision), same alias, title, summary, metadata,
// labels, parent, created_at (when req sets it), expire_after and messages. A Driver
// answers cur to a retry and ErrAlreadyExists otherwise. storedAt is called
// only when the metadata matches.
func SameCreate(cur *Session, req CreateRequest, msgs Messages, storedAt StoredAtFunc) (bool, error) {
	p := req.Parent
	same := cur.Namespace == req.Namespace && cur.Revision == max(req.Revision, 1) && cur.Alias == req.Alias &&
		cur.Title == req.Title && cur.TitleDerived == req.TitleDerived && cur.Summary == req.Summary &&
		maps.Equal(cur.Metadata, req.Metadata) && maps.Equal(cur.Labels, req.Labels) &&
		(p == nil) == (cur.Parent == nil) && (p == nil || *p == *cur.Parent) &&
		(req.CreatedAt.IsZero() || req.CreatedAt.Equal(cur.CreatedAt)) && cur.ExpireAfter == req.ExpireAfter &&
		cur.MessageCount == int64(len(msgs.Sent))
	if !same {
		return false, nil
	}
	return sameMessages(msgs.Sent, storedAt)
}

// SameSave reports whether req would change nothing in cur: same title,
// summary, metadata and messages. A Driver answers cur to such a save before
// checking the expected revision. storedAt is called only when the metadata
// matches.
func SameSave(cur *Session, req SaveRequest, msgs Messages, storedAt StoredAtFunc) (bool, error) {
	if cur.Title != req.Title || cur.TitleDerived != req.TitleDerived || cur.Summary != req.Summary || !maps.Equal(cur.Metadata, req.Metadata) ||
		cur.MessageCount != int64(len(msgs.Sent)) {
		return false, nil
	}
	return sameMessages(msgs.Sent, storedAt)
}

func sameMessages(sent []*sessiondv1.Message, storedAt StoredAtFunc) (bool, error) {
	for i, m := range sent {
		s, err := storedAt(i)
		if err != nil {
			return false, err
		}
		if !SameMessage(s, m) {
			return false, nil
		}
	}
	return true, nil
}

// ApplyUpdate returns a copy of cur with the fields req.Fields names set to
// req's values, and whether that changes anything. Revision and UpdatedAt are
// left for the Driver to bump when changed is true; when it is false the
// update is a no-op, answered with cur before checking the expected
// revision. An alias that changes to a non-empty one must then be reserved
// by the Driver (ErrAliasInUse if another session has it).
func ApplyUpdate(cur *Session, req UpdateRequest) (next *Session, changed bool) {
	n := *cur
	if req.Fields&UpdateAlias != 0 && n.Alias != req.Alias {
		n.Alias, changed = req.Alias, true
	}
	if req.Fields&UpdateTitle != 0 && (n.Title != req.Title || n.TitleDerived) {
		n.Title, n.TitleDerived, changed = req.Title, false, true
	}
	if req.Fields&UpdateSummary != 0 && n.Summary != req.Summary {
		n.Summary, changed = req.Summary, true
	}
	n.Metadata, n.Labels = maps.Clone(cur.Metadata), maps.Clone(cur.Labels)
	if req.Fields&UpdateMetadata != 0 && !maps.Equal(n.Metadata, req.Metadata) {
		n.Metadata, changed = maps.Clone(req.Metadata), true
	}
	if req.Fields&UpdateLabels != 0 && !maps.Equal(n.Labels, req.Labels) {
		n.Labels, changed = maps.Clone(req.Labels), true
	}
	if req.Fields&UpdateExpireAfter != 0 && n.ExpireAfter != req.ExpireAfter {
		n.ExpireAfter, changed = req.ExpireAfter, true
	}
	if cur.Parent != nil {
		p := *cur.Parent
		n.Parent = &p
	}
	return &n, changed
}
