package integration

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestViewerFollowsLiveTurn opens the viewer on a session while an answer
// streams into it: the open message shows as being written and grows with
// each delta, then shows complete once finished; a reload mid-turn picks
// the turn up where it is.
func TestViewerFollowsLiveTurn(t *testing.T) {
	d, base := startViewerDaemon(t)
	ctx := testContext(t, 3*time.Minute)
	c := d.client(t)
	s, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Title: "live", Messages: []*sessiondv1.Message{
		textMsg("q", sessiondv1.Role_ROLE_USER, "Why is the sky blue?"),
		{Id: "a", Role: sessiondv1.Role_ROLE_ASSISTANT, State: sessiondv1.MessageState_MESSAGE_STATE_STREAMING, Content: "Because "},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ref := byID("", s.GetSession().GetId())
	off := int64(len("Because "))
	write := func(text string) {
		t.Helper()
		if _, err := c.AppendDelta(ctx, &sessiondv1.AppendDeltaRequest{Ref: ref, MessageId: "a", Offset: off, Content: text}); err != nil {
			t.Fatalf("AppendDelta(%q): %v", text, err)
		}
		off += int64(len(text))
	}
	b := newBrowser(t)
	b.run(t, "open the session", chromedp.Navigate(base+"/ui/sessions/"+s.GetSession().GetId()))
	b.waitFor(t, "the open message, live", `document.querySelector('#m-1.streaming') !== null && document.getElementById('live').textContent.includes('live')`)
	write("of Rayleigh ")
	write("scattering")
	b.waitFor(t, "the deltas", `document.querySelector('#m-1 > .body').textContent.includes('Because of Rayleigh scattering')`)
	b.screenshot(t, "viewer-live-turn.png")

	b.run(t, "reload mid-turn", chromedp.Reload())
	b.waitFor(t, "the turn after the reload", `document.querySelector('#m-1.streaming > .body')?.textContent.includes('Rayleigh scattering') && document.getElementById('live').textContent.includes('live')`)
	write(" of sunlight.")
	b.waitFor(t, "a delta after the reload", `document.querySelector('#m-1 > .body').textContent.includes('scattering of sunlight.')`)

	if _, err := c.FinishMessage(ctx, &sessiondv1.FinishMessageRequest{Ref: ref, MessageId: "a", Model: "m1"}); err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, "the finished turn", `document.querySelector('#m-1') !== null && !document.querySelector('#m-1').classList.contains('streaming') && document.querySelector('#m-1 .model')?.textContent === 'm1'`)
	b.checkNoProblems(t)
}
