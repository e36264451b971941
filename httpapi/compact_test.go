package httpapi_test

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestCompactRoute: POST .../sessions/{id}:compact stores a compaction, and
// GET .../messages?view=LOAD_VIEW_CONTEXT answers the context view.
func TestCompactRoute(t *testing.T) {
	base := newAPI(t)
	var created struct {
		Session struct{ ID string } `json:"session"`
	}
	b := mustSend(t, 200, "POST", base+"/v1/sessions", `{"alias": "long", "title": "a long talk", "messages": [
		{"id": "u1", "role": "ROLE_USER", "content": "first"},
		{"id": "a1", "role": "ROLE_ASSISTANT", "content": "answer"},
		{"id": "u2", "role": "ROLE_USER", "content": "second"}]}`)
	if err := json.Unmarshal(b, &created); err != nil || created.Session.ID == "" {
		t.Fatalf("create: %s (%v)", b, err)
	}
	b = mustSend(t, 200, "POST", base+"/v1/aliases/long:compact",
		`{"through_message_id": "a1", "expected_revision": 1, "summary": {"id": "sum", "role": "ROLE_SYSTEM", "content": "a summary"}}`)
	if !bytes.Contains(b, []byte(`"contextMessageCount":"2"`)) || !bytes.Contains(b, []byte(`"throughMessageId":"a1"`)) {
		t.Errorf("compact answered %s", b)
	}
	b = mustSend(t, 200, "GET", base+"/v1/sessions/"+created.Session.ID+"/messages?view=LOAD_VIEW_CONTEXT", "")
	if !bytes.Contains(b, []byte(`"a summary"`)) || !bytes.Contains(b, []byte(`"second"`)) || bytes.Contains(b, []byte(`"first"`)) {
		t.Errorf("context view: %s", b)
	}
	code, _, b := send(t, "POST", base+"/v1/aliases/long:compact", `{"through_message_id": "u2", "expected_revision": 1, "summary": {"role": "ROLE_SYSTEM", "content": "x"}}`)
	if code != 409 {
		t.Errorf("stale compact: %d %s; want 409 (ABORTED)", code, b)
	}
}
