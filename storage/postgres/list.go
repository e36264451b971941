package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sessiond/sessiond/storage"
)

// A listing reads keyset pages of the sessions_list index: a short first
// page, so that the first session comes soon, then pages of listPage.
const (
	listFirstPage = 500
	listPage      = 5000
)

// List yields sessions in list order, reading keyset pages; no transaction
// or lock is held while yield runs.
func (s *Store) List(ctx context.Context, opts storage.ListOptions, yield func(*storage.Session) error) error {
	return s.listPaged(ctx, opts, listFirstPage, listPage, yield)
}

// listPageResult is a page of a listing as its read ended.
type listPageResult struct {
	got []*storage.Session
	err error
}

// listPaged is List with its page sizes. While one page is yielded, the
// next is read on a connection of its own, so that the database and the
// caller work at the same time; at most one page is read ahead. When
// listPaged returns, that read has ended (cancelled, if still running) and
// released its connection.
func (s *Store) listPaged(ctx context.Context, opts storage.ListOptions, first, page int64, yield func(*storage.Session) error) error {
	ctx, cancel := context.WithCancel(ctx)
	next := make(chan listPageResult, 1)
	fetching := false
	defer func() {
		cancel()
		if fetching {
			<-next
		}
	}()
	left := opts.Limit
	fetch := func(after *storage.Cursor, n int64) {
		fetching = true
		go func() {
			got, err := listPage1(ctx, s.pool, opts, after, n)
			next <- listPageResult{got, wrapErr(err)}
		}()
	}
	size := func(n int64) int64 {
		if left > 0 {
			return min(n, left)
		}
		return n
	}
	n := size(first)
	fetch(opts.After, n)
	for {
		r := <-next
		fetching = false
		if r.err != nil {
			return r.err
		}
		more := int64(len(r.got)) == n
		if left > 0 {
			left -= int64(len(r.got))
			more = more && left > 0
		}
		if more {
			last := r.got[len(r.got)-1]
			n = size(page)
			fetch(&storage.Cursor{UpdatedAt: last.UpdatedAt, ID: last.ID}, n)
		}
		for _, m := range r.got {
			if err := yield(m); err != nil {
				return err
			}
		}
		if !more {
			return nil
		}
	}
}

// querier is what pool connections and transactions share.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// listWhere builds the filter of a listing of sessions; the first argument
// is the namespace.
func listWhere(opts storage.ListOptions, after *storage.Cursor) (string, []any) {
	where := []string{"namespace = $1"}
	var filters []string // conditions on the session's session_filters row f
	args := []any{opts.Namespace}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if opts.AliasPrefix != "" {
		where = append(where, "starts_with(alias, "+arg(opts.AliasPrefix)+")")
	}
	if len(opts.Labels) > 0 {
		// The label and model indexes hold only sessions that have some.
		filters = append(filters, "f.label_pairs @> "+arg(labelPairs(opts.Labels))+"::bytea[] AND f.label_pairs <> '{}'")
	}
	if !opts.UpdatedAfter.IsZero() {
		where = append(where, "updated_ns > "+arg(opts.UpdatedAfter.UnixNano()))
	}
	if !opts.UpdatedBefore.IsZero() {
		where = append(where, "updated_ns < "+arg(opts.UpdatedBefore.UnixNano()))
	}
	if opts.Model != "" {
		filters = append(filters, "f.models @> ARRAY["+arg(opts.Model)+"::text] AND f.models <> '{}'")
	}
	if after != nil {
		// The first condition bounds the index scan; the second skips the
		// rows at the cursor's own time up to its id.
		t, id := arg(after.UpdatedAt.UnixNano()), arg(after.ID)
		where = append(where, fmt.Sprintf("updated_ns <= %s AND (updated_ns < %s OR id::text > %s)", t, t, id))
	}
	if len(filters) > 0 {
		// The ids the filter indexes find, looked up by key: joined to
		// sessions instead, PostgreSQL would rather read every session of
		// the namespace than look each up.
		where = append(where, "id = ANY(ARRAY(SELECT f.id FROM session_filters f WHERE "+strings.Join(filters, " AND ")+"))")
	}
	return strings.Join(where, " AND "), args
}

func listPage1(ctx context.Context, q querier, opts storage.ListOptions, after *storage.Cursor, n int64) ([]*storage.Session, error) {
	sql, args := listQuery(opts, after, n)
	return collectSessions(q.Query(ctx, sql, args...))
}

// listQuery is the query (and its arguments) reading a listing's page of
// at most n sessions after the cursor.
func listQuery(opts storage.ListOptions, after *storage.Cursor, n int64) (string, []any) {
	where, args := listWhere(opts, after)
	args = append(args, n)
	return fmt.Sprintf("SELECT %s FROM sessions WHERE %s ORDER BY updated_ns DESC, sessions.id LIMIT $%d", sessionCols, where, len(args)), args
}

// sessionSlab is how many sessions collectSessions allocates at once.
const sessionSlab = 64

// collectSessions scans every row of a sessionCols query, taking the
// query's own result as it comes. Sessions are allocated sessionSlab at a
// time, each row is read into the same destinations, and the metadata and
// tally are decoded from the connection's bytes: a listing's rows are most
// of what it allocates.
func collectSessions(rows pgx.Rows, err error) ([]*storage.Session, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		out  []*storage.Session
		slab []storage.Session
		c    = newSessionScan[pgtype.DriverBytes]()
	)
	for rows.Next() {
		if len(slab) == 0 {
			slab = make([]storage.Session, sessionSlab)
		}
		m := &slab[0]
		slab = slab[1:]
		if err := c.scan(rows, m); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// searchPage is how many candidate sessions one search page reads.
const searchPage = 200

// Search finds candidates with the session search index (sessions_search)
// and the messages' signatures (message_search.sig) and checks each on its
// real strings, session by session in list order.
func (s *Store) Search(ctx context.Context, opts storage.SearchOptions, yield func(storage.SearchHit) error) error {
	q := strings.ToLower(opts.Query)
	f := newSearchFilter(opts.Query)
	hits := int64(0)
	var after *storage.Cursor
	for {
		sql, args := f.candidates(opts.Namespace, after)
		cands, err := collectSessions(s.pool.Query(ctx, sql, args...))
		if err != nil {
			return wrapErr(err)
		}
		for _, m := range cands {
			found, err := s.searchSession(ctx, m, q, f)
			if err != nil {
				return err
			}
			for _, h := range found {
				if opts.Limit > 0 && hits >= opts.Limit {
					return nil
				}
				hits++
				if err := yield(h); err != nil {
					return err
				}
			}
		}
		if len(cands) < searchPage {
			return nil
		}
		last := cands[len(cands)-1]
		after = &storage.Cursor{UpdatedAt: last.UpdatedAt, ID: last.ID}
	}
}

// candidates returns the query (and its arguments) reading the next page
// of sessions of namespace ns, after the cursor, that may hold a hit: a
// metadata match, a message signature match, or messages the indexer has
// not reached, which searchSession reads from their rows. The metadata and the
// messages are matched by key on each session walked (scalar subqueries,
// which PostgreSQL does not turn into a scan of every session's rows).
func (f searchFilter) candidates(ns string, after *storage.Cursor) (string, []any) {
	where, args := listWhere(storage.ListOptions{Namespace: ns}, after)
	args = append(args, f.pattern)
	p := len(args)
	msgs, args := f.messages(args)
	args = append(args, searchPage)
	return fmt.Sprintf(`SELECT %s FROM sessions WHERE %s
		AND ((SELECT f.`+metaSearched+` AND f.meta_search LIKE $%d FROM session_filters f WHERE f.id = sessions.id)
		OR search_count < message_count
		OR (SELECT true FROM message_search m WHERE m.session_id = sessions.id AND %s LIMIT 1))
		ORDER BY updated_ns DESC, sessions.id LIMIT $%d`, sessionCols, where, p, msgs, len(args)), args
}

// metaSearched is sessions_search's condition (migrations 8 and 10), on
// session_filters: the session has a given title, an alias or a summary,
// which its meta_search holds (searchText of the three, joined by
// newlines). A session without them has no metadata hit, whatever the
// query.
const metaSearched = `meta_search <> E'\n\n'`

// searchFilter is what a search's candidates match: the session's
// metadata (pattern) or a message's signature (sig).
type searchFilter struct {
	text    string      // the query as searchText makes a text
	pattern string      // LIKE pattern on session_filters.meta_search: text anywhere
	sig     pgtype.Bits // the signature of text
	narrows bool        // text has a window: sig narrows the messages
}

func newSearchFilter(query string) searchFilter {
	f := searchFilter{text: searchText(query)}
	f.pattern = "%" + likeEscape(f.text) + "%"
	f.sig, f.narrows = signature(f.text)
	return f
}

// messages returns the SQL condition on a message_search row m that the
// messages holding the query meet, with its arguments appended to args: m's
// signature has every bit of the query's. A query shorter than three bytes
// reads every message of the namespace.
func (f searchFilter) messages(args []any) (string, []any) {
	if !f.narrows {
		return "true", args
	}
	args = append(args, f.sig)
	return fmt.Sprintf("(m.sig & $%d::bit(%d)) = $%d::bit(%d)", len(args), sigBits, len(args), sigBits), args
}

// searchSession returns m's hits: its metadata hit first, then its
// messages' in order: those whose signature f matches, and every one the
// indexer has not reached. A message that does not decode ends the
// session's hits (damaged sessions are skipped, as documented).
func (s *Store) searchSession(ctx context.Context, m *storage.Session, q string, f searchFilter) ([]storage.SearchHit, error) {
	var out []storage.SearchHit
	for _, fld := range []string{m.GivenTitle(), m.Alias, m.Summary} {
		if snip, ok := storage.Snippet(fld, q); ok {
			out = append(out, storage.SearchHit{Session: clone(m), MessageIndex: -1, Snippet: snip})
			break
		}
	}
	cond, args := f.messages([]any{m.ID})
	rows, err := s.pool.Query(ctx, `SELECT pos, body FROM messages WHERE session_id = $1
		AND (pos >= (SELECT search_count FROM sessions WHERE id = $1)
			OR pos IN (SELECT m.pos FROM message_search m WHERE m.session_id = $1 AND `+cond+`))
		ORDER BY pos`, args...)
	if err != nil {
		return out, wrapErr(err)
	}
	var pos int64
	var body []byte
	_, err = pgx.ForEachRow(rows, []any{&pos, &body}, func() error {
		msg, err := decode(m.ID, body)
		if err != nil {
			return err
		}
		for _, t := range storage.MessageTexts(msg) {
			if snip, ok := storage.Snippet(t, q); ok {
				out = append(out, storage.SearchHit{Session: clone(m), MessageIndex: pos, Snippet: snip})
				break
			}
		}
		return nil
	})
	return out, wrapErr(err)
}

// likeEscape escapes LIKE's wildcards (the default escape is backslash).
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// Expired yields the sessions past their idle time to live: those with
// their own (sessions_expiry), then, per namespace default, those without
// (sessions_list), at most opts.Limit in all.
func (s *Store) Expired(ctx context.Context, opts storage.ExpiredOptions, yield func(*storage.Session) error) error {
	now := opts.Now.UnixNano()
	type query struct {
		sql  string
		args []any
	}
	qs := []query{{`SELECT ` + sessionCols + ` FROM sessions WHERE expire_after_ns > 0 AND updated_ns + expire_after_ns <= $1 LIMIT $2`,
		[]any{now}}}
	for ns, d := range opts.Defaults {
		qs = append(qs, query{`SELECT ` + sessionCols + ` FROM sessions WHERE namespace = $1 AND expire_after_ns = 0 AND updated_ns <= $2 LIMIT $3`,
			[]any{ns, opts.Now.Add(-d).UnixNano()}})
	}
	left := opts.Limit
	for _, q := range qs {
		// Read whole, then yielded: no connection is held while yield runs.
		got, err := collectSessions(s.pool.Query(ctx, q.sql, append(q.args, pgLimit(left))...))
		if err != nil {
			return wrapErr(err)
		}
		for _, m := range got {
			if err := yield(m); err != nil {
				return err
			}
		}
		if opts.Limit > 0 {
			if left -= int64(len(got)); left <= 0 {
				return nil
			}
		}
	}
	return nil
}
