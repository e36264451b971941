package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestViewerCompaction checks that the viewer folds a compacted range: the
// summary is shown in the range's place, the original messages sit in a
// closed <details> that opens on a click or on a link to one of them, and a
// compaction made while the page is open is folded live.
func TestViewerCompaction(t *testing.T) {
	d, base := startViewerDaemon(t)
	ctx := testContext(t, 3*time.Minute)
	c := d.client(t)
	call := textMsg("a1", sessiondv1.Role_ROLE_ASSISTANT, "")
	call.ToolCalls = []*sessiondv1.ToolCall{{Id: "c1", Name: "search", Arguments: `{"q":"Oslo hotels"}`}}
	result := textMsg("t1", sessiondv1.Role_ROLE_TOOL, "3 hotels found")
	result.ToolCallId = "c1"
	resp, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: viewerNS, Title: "Oslo trip", Messages: []*sessiondv1.Message{
		textMsg("u1", sessiondv1.Role_ROLE_USER, "plan a trip to Oslo"), call, result,
		textMsg("u2", sessiondv1.Role_ROLE_USER, "book the first"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetSession().GetId()
	compact := func(through, summaryID, text string) {
		t.Helper()
		if _, err := c.CompactSession(ctx, &sessiondv1.CompactSessionRequest{Ref: byID(viewerNS, id), ThroughMessageId: through,
			Summary: textMsg(summaryID, sessiondv1.Role_ROLE_SYSTEM, text)}); err != nil {
			t.Fatal(err)
		}
	}
	compact("t1", "sum1", "The user plans a trip to **Oslo**; three hotels were found.")

	b := newBrowser(t)
	b.run(t, "open the compacted session", chromedp.Navigate(base+"/ui/sessions/"+id+"?namespace="+viewerNS))
	b.waitFor(t, "the folded range", `!!document.querySelector('#messages > li#compaction details.compacted')`)
	type fold struct {
		Top      []string // ids of the list's own items
		Folded   []string // ids of the items inside the fold
		Open     bool
		Summary  string // the summary's rendered text
		Strong   string // its Markdown, rendered
		Label    string // the fold's <summary>
		Count    string
		Visible  bool // whether the first original message is shown
		Through  string
		HasPairs int // tool pairs inside the fold
	}
	const readFold = `(() => { const li = document.getElementById('compaction'); const det = li.querySelector('details.compacted');
	  return { top: [...document.querySelectorAll('#messages > li')].map((e) => e.id),
	    folded: [...det.querySelectorAll('ol.messages > li')].map((e) => e.id), open: det.open,
	    summary: li.querySelector(':scope > .body').textContent, strong: li.querySelector(':scope > .body strong')?.textContent || '',
	    label: det.querySelector('summary').textContent, count: li.dataset.throughMessageCount, through: li.dataset.throughMessageId,
	    visible: document.getElementById('m-0').checkVisibility(), hasPairs: det.querySelectorAll('.tool-pair').length }; })()`
	var f fold
	b.eval(t, readFold, &f)
	if strings.Join(f.Top, ",") != "compaction,m-3" || strings.Join(f.Folded, ",") != "m-0,m-1,m-2" {
		t.Errorf("list items %q, folded %q; want compaction,m-3 and m-0,m-1,m-2", f.Top, f.Folded)
	}
	if f.Open || f.Visible {
		t.Errorf("the compacted range is shown unfolded (open %v, first message visible %v)", f.Open, f.Visible)
	}
	if !strings.Contains(f.Summary, "three hotels were found") || f.Strong != "Oslo" {
		t.Errorf("summary shown as %q (bold %q), want the summary's Markdown rendered", f.Summary, f.Strong)
	}
	if f.Label != "3 original messages, compacted" || f.Count != "3" || f.Through != "t1" || f.HasPairs != 1 {
		t.Errorf("fold %+v; want 3 messages through t1 with the tool call's pair inside", f)
	}
	b.screenshot(t, "viewer-compaction.png")

	b.run(t, "open the fold", chromedp.Click(chromedp.CSS("#compaction details.compacted > summary")))
	b.waitFor(t, "the originals shown", `document.getElementById('m-0').checkVisibility()`)
	b.screenshot(t, "viewer-compaction-open.png")

	// A link to a folded message opens the fold.
	b.run(t, "follow a link into the range", chromedp.Navigate("about:blank"), chromedp.Navigate(base+"/ui/sessions/"+id+"?namespace="+viewerNS+"#m-1"))
	b.waitFor(t, "the linked message, unfolded", `!!document.querySelector('#m-1.target') && document.querySelector('#compaction details.compacted').open`)

	// A compaction made while the page is open is folded live.
	compact("u2", "sum2", "Booked the first hotel in Oslo.")
	b.waitFor(t, "the new compaction folded", `document.getElementById('compaction')?.dataset.throughMessageCount === '4'`)
	b.eval(t, readFold, &f)
	if strings.Join(f.Top, ",") != "compaction" || strings.Join(f.Folded, ",") != "m-0,m-1,m-2,m-3" || !strings.Contains(f.Summary, "Booked the first hotel") {
		t.Errorf("after the second compaction: %+v", f)
	}
	b.checkNoProblems(t)
}
