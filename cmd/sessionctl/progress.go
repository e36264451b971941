package main

import (
	"fmt"
	"io"
	"time"
)

// progress draws a one-line counter on stderr for long export, import and
// fsck runs, only when stderr is a terminal: redirected to a file or a pipe,
// carriage-return updates would be noise in a log.
type progress struct {
	w       io.Writer
	on      bool
	label   string
	last    time.Time
	printed bool
}

// progressEvery limits redraws; a terminal needs no more than ~10 a second.
const progressEvery = 100 * time.Millisecond

func newProgress(e *env, label string) *progress {
	return &progress{w: e.stderr, on: terminal(e.stderr), label: label}
}

// update shows done of total units; total <= 0 means unknown.
func (p *progress) update(done, total int64, unit string) {
	if !p.on {
		return
	}
	now := time.Now()
	if p.printed && now.Sub(p.last) < progressEvery && (total <= 0 || done < total) {
		return
	}
	p.last, p.printed = now, true
	if total > 0 {
		fmt.Fprintf(p.w, "\r\033[K%s %d/%d %s (%d%%)", p.label, done, total, unit, done*100/total)
	} else {
		fmt.Fprintf(p.w, "\r\033[K%s %d %s", p.label, done, unit)
	}
}

// last draws the final count even if a redraw was due later, so that a
// person sees where the run ended.
func (p *progress) final(done, total int64, unit string) {
	p.printed = false
	p.update(done, total, unit)
}

// finish erases the counter so that the command's last words stand alone.
func (p *progress) finish() {
	if p.on && p.printed {
		fmt.Fprint(p.w, "\r\033[K")
		p.printed = false
	}
}
