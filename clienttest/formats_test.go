package clienttest_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/client/convert"
	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestHandleExport: a request body imported as a session (messages, and
// its parameters as session metadata), resumed in a Handle, exports as the
// same body, unsaved turns included.
func TestHandleExport(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	body, err := os.ReadFile(filepath.Join("..", "client", "convert", "testdata", "anthropic.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := convert.Import(convert.Anthropic, body)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.New(t.Context(), client.WithAlias("imported"), client.WithSessionMetadata(s.GetMetadata()))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(s.GetMessages()...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(t.Context()); err != nil {
		t.Fatal(err)
	}

	h, err = c.Open(t.Context(), client.Alias("imported"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(t.Context())
	got, warns, err := h.Export(convert.Anthropic, convert.ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) > 0 {
		t.Errorf("warnings: %v", warns)
	}
	var want, have any
	_ = json.Unmarshal(body, &want)
	if err := json.Unmarshal(got, &have); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("(-imported +exported):\n%s", diff)
	}

	// An unsaved turn is part of the export.
	if err := h.Append(&sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: "one more"}); err != nil {
		t.Fatal(err)
	}
	got, _, err = h.Export(convert.OpenAIChat, convert.ExportOptions{Model: "gpt-4.1"})
	if err != nil {
		t.Fatal(err)
	}
	var chat struct {
		Model    string
		Messages []struct{ Role, Content any }
	}
	if err := json.Unmarshal(got, &chat); err != nil || chat.Model != "gpt-4.1" || len(chat.Messages) != 11 || chat.Messages[10].Content != "one more" {
		t.Errorf("openai-chat export with an unsaved turn: %v\n%s", err, got)
	}
}
