// Package progress is the one progress reporter of every long run (run and
// its broker matrix, explore, soak): done/total, the failures or
// violations so far, elapsed and an estimate of what remains, as one line
// rewritten in place on a terminal, or one line per interval otherwise.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Config says what a reporter counts and how it shows it.
type Config struct {
	Noun string // what is counted: "scenarios", "points", "events"
	Bad  string // what goes wrong, counted apart: "failed", "violation(s)"
	// Live draws one line rewritten in place (\r): a terminal. Otherwise
	// a line is printed every Every (a log, CI), and one at the end if
	// any was.
	Live  bool
	Every time.Duration
}

// DefaultEvery is how often a reporter that is not live prints a line.
const DefaultEvery = time.Minute

// liveTick keeps a live line's elapsed time moving.
const liveTick = 250 * time.Millisecond

// Reporter reports one long run's progress. A nil *Reporter reports
// nothing, so code that may run without one needs no branch.
type Reporter struct {
	mu      sync.Mutex
	w       io.Writer
	c       Config
	now     func() time.Time
	start   time.Time
	last    time.Time // of the last line printed (not live)
	total   int
	done    int
	bad     int
	drawn   bool // a live line is on the screen
	printed bool // a line was printed (not live): the end gets one too
	closed  bool
	stop    chan struct{}
}

// New starts a reporter writing to w, with a ticker that redraws a live
// line and prints a line per c.Every otherwise.
func New(w io.Writer, c Config) *Reporter {
	r := newReporter(w, c, time.Now)
	tick := liveTick
	if !c.Live {
		tick = min(time.Second, r.c.Every/4)
	}
	go r.run(tick)
	return r
}

// newReporter is New without the ticker (tests drive Tick with a fake clock).
func newReporter(w io.Writer, c Config, now func() time.Time) *Reporter {
	if c.Every <= 0 {
		c.Every = DefaultEvery
	}
	t := now()
	return &Reporter{w: w, c: c, now: now, start: t, last: t, stop: make(chan struct{})}
}

func (r *Reporter) run(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			r.Tick()
		case <-r.stop:
			return
		}
	}
}

// Add adds n to what there is to do (explore's second depth adds its
// pairs once the first is done; a session's runs add theirs).
func (r *Reporter) Add(n int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total += n
	r.redraw()
}

// Done counts n more done, bad of them failed (or violated).
func (r *Reporter) Done(n, bad int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done += n
	r.bad += bad
	r.redraw()
}

// Tick redraws a live line (elapsed moves) or, not live, prints a line
// once Every has passed since the last.
func (r *Reporter) Tick() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.c.Live {
		r.redraw()
		return
	}
	if now := r.now(); now.Sub(r.last) >= r.c.Every {
		r.last = now
		r.printed = true
		fmt.Fprintf(r.w, "progress: %s\n", r.line(now))
	}
}

// Above runs print, which writes whole lines to the same screen, with a
// live line erased first and drawn again below what print wrote.
func (r *Reporter) Above(print func()) {
	if r == nil {
		print()
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.erase()
	print()
	r.redraw()
}

// Close stops the ticker and ends the progress: a live line is erased (the
// summary that follows says it all); not live, a last line is printed if
// any was, so a log that showed the run's progress shows its end.
func (r *Reporter) Close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.erase()
	if !r.c.Live && r.printed {
		fmt.Fprintf(r.w, "progress: %s (done)\n", r.line(r.now()))
	}
	r.mu.Unlock()
	close(r.stop)
}

func (r *Reporter) erase() {
	if r.drawn {
		fmt.Fprint(r.w, "\r\x1b[K")
		r.drawn = false
	}
}

// redraw draws the live line again (nothing when not live).
func (r *Reporter) redraw() {
	if !r.c.Live || r.closed {
		return
	}
	r.erase()
	fmt.Fprint(r.w, r.line(r.now()))
	r.drawn = true
}

// line is the progress at now: "12/48 points, 1 violation(s), 1m20s
// elapsed, about 3m left".
func (r *Reporter) line(now time.Time) string {
	el := now.Sub(r.start)
	if r.total == 0 {
		return fmt.Sprintf("starting, %s elapsed", round(el))
	}
	s := fmt.Sprintf("%d/%d %s, %d %s, %s elapsed", r.done, r.total, r.c.Noun, r.bad, r.c.Bad, round(el))
	switch {
	case r.done >= r.total:
		return s
	case r.done == 0:
		return s + ", estimating what remains"
	}
	// What is left at the pace so far: long runs' units take about alike.
	left := time.Duration(float64(el) / float64(r.done) * float64(r.total-r.done))
	return s + fmt.Sprintf(", about %s left", round(left))
}

// round shows a duration to the second (a tenth below ten seconds).
func round(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// EnvEvery names the environment variable that sets Every: a test (or a
// person watching a log) gets a line every few seconds instead of a minute.
const EnvEvery = "RUNNER_PROGRESS_EVERY"

// ForStderr is the config for a run's stderr w: live on a terminal outside
// CI (where a pseudo-terminal may still not redraw), else a line per
// minute or per $RUNNER_PROGRESS_EVERY. The error says what is wrong with
// the variable.
func ForStderr(w io.Writer, noun, bad string) (Config, error) {
	c := Config{Noun: noun, Bad: bad, Live: IsTerminal(w) && os.Getenv("CI") == ""}
	if v := os.Getenv(EnvEvery); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 100*time.Millisecond {
			return c, fmt.Errorf("%s=%q: want a duration of at least 100ms such as 5s", EnvEvery, v)
		}
		c.Every, c.Live = d, false // asked for lines: lines, also on a terminal
	}
	return c, nil
}

// IsTerminal reports whether w is a character device (a terminal), where
// a line rewritten in place helps; piped or in a file, plain lines are
// better.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
