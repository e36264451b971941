package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/metrics"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/file"
)

// logLine returns the first JSON log line of d whose msg is msg, or nil.
func (d *daemon) logLine(msg string) map[string]any {
	sc := bufio.NewScanner(strings.NewReader(d.stderr.String()))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == msg {
			return line
		}
	}
	return nil
}

// listingEncodings scrapes the daemon's sessiond_store_list_encodings_total
// series: made by the warm-up, made by listings.
func listingEncodings(t *testing.T, url string) (warmup, listing float64) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	samples, err := metrics.ParseText(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	return samples[`sessiond_store_list_encodings_total{by="warmup"}`], samples[`sessiond_store_list_encodings_total{by="listing"}`]
}

// A daemon started on sessions makes their ListSessions frames in the
// background without being asked, once it serves; its first listing then
// encodes nothing and answers exactly the sessions, in the order, that the
// store lists.
func TestListingsWarmedAtStart(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	ctx := t.Context()
	// The sessions, written straight to the data dir: two namespaces, some
	// updated after their creation so that the order is not the creation
	// order.
	d0, err := file.Open(ctx, dataDir)
	if err != nil {
		t.Fatal(err)
	}
	st := storage.New(d0, storage.DefaultLimits())
	nss := []string{"", "warm"}
	const perNS = 150
	for _, ns := range nss {
		for i := range perNS {
			s, err := st.Create(ctx, storage.CreateRequest{Namespace: ns, Title: fmt.Sprint("t", i), Labels: map[string]string{"n": fmt.Sprint(i % 3)}})
			if err != nil {
				t.Fatal(err)
			}
			if i%4 == 0 {
				if _, err := st.Update(ctx, storage.UpdateRequest{Ref: storage.Ref{Namespace: ns, ID: s.ID}, Fields: storage.UpdateTitle, Title: fmt.Sprint("u", i)}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	type row struct {
		ID, Title string
		Revision  uint64
	}
	want := map[string][]row{}
	for _, ns := range nss {
		if err := st.List(ctx, storage.ListOptions{Namespace: ns}, func(s *storage.Session) error {
			want[ns] = append(want[ns], row{s.ID, s.Title, s.Revision})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	d := start(t, "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--metrics-listen", "127.0.0.1:0")
	line := d.logLine("serving metrics")
	url, _ := line["url"].(string)
	if url == "" {
		t.Fatalf("no metrics url logged: %s", d.stderr.String())
	}
	total := float64(len(nss) * perNS)
	deadline := time.Now().Add(30 * time.Second)
	for {
		warmup, listing := listingEncodings(t, url)
		if listing != 0 {
			t.Fatalf("%v frames encoded by listings before any listing", listing)
		}
		if warmup == total {
			break
		}
		if warmup > total || time.Now().After(deadline) {
			t.Fatalf("the warm-up made %v frames (after 30 s), want %v; log:\n%s", warmup, total, d.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l := d.logLine("listing frames warmed"); l == nil || l["sessions"] != total {
		t.Errorf("log line of the warm-up: %v; want sessions %v", l, total)
	}

	c := sessiondv1.NewSessionStoreServiceClient(dial(t, d.addr))
	for _, ns := range nss {
		stream, err := c.ListSessions(ctx, &sessiondv1.ListSessionsRequest{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		var got []row
		for {
			f, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			s := f.GetSession()
			if s.GetNamespace() != ns || f.GetNextPageToken() == "" || s.GetLabels()["n"] == "" {
				t.Fatalf("frame %d of namespace %q: %v", len(got), ns, f)
			}
			got = append(got, row{s.GetId(), s.GetTitle(), s.GetRevision()})
		}
		if d := cmp.Diff(want[ns], got); d != "" {
			t.Fatalf("namespace %q: the listing after the warm-up differs from the store's (-store +listed):\n%s", ns, d)
		}
	}
	warmup, listing := listingEncodings(t, url)
	if warmup != total || listing != 0 {
		t.Fatalf("after listing: warm-up made %v frames, listings %v; want %v and 0", warmup, listing, total)
	}
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
}
