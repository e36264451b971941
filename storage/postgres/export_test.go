package postgres

// EncodeMeta lets tests write sessions rows as the driver does.
var EncodeMeta = encodeMeta

// MessageSearch returns the condition on messages m (and its arguments)
// that Search uses to find the messages holding query, as it decides it.
func MessageSearch(query string, indexed bool) (string, []any) {
	f := searchFilter{text: searchText(query), indexed: indexed}
	f.pattern = "%" + likeEscape(f.text) + "%"
	return f.messages(nil)
}

// ListWhere is the WHERE clause (and its arguments) List reads sessions
// with, for tests that check the indexes serve it.
var ListWhere = listWhere
