package report

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Console serialises what a run prints: whole result blocks and, on a
// terminal, one live progress line that each block first erases.
type Console struct {
	mu       sync.Mutex
	out      io.Writer
	verbose  bool
	live     bool // draw the progress line
	total    int
	done     int
	failed   int
	start    time.Time
	drawn    bool
	stopTick chan struct{}
}

// NewConsole prints to out the results of a run of total scenarios: each
// result's block (every step's trace when verbose), and with progress a live
// progress line.
func NewConsole(out io.Writer, verbose, progress bool, total int) *Console {
	c := &Console{out: out, verbose: verbose, live: progress && out != nil, total: total, start: time.Now(), stopTick: make(chan struct{})}
	if c.live {
		go c.tick()
	}
	return c
}

// Result prints one scenario's block and updates the progress line.
func (c *Console) Result(r *Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done++
	if !r.Passed() {
		c.failed++
	}
	if c.out == nil {
		return
	}
	c.erase()
	_, _ = c.out.Write(FormatResult(r, c.verbose))
	c.draw()
}

// tick keeps the elapsed time moving while long scenarios run.
func (c *Console) tick() {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.mu.Lock()
			c.erase()
			c.draw()
			c.mu.Unlock()
		case <-c.stopTick:
			return
		}
	}
}

func (c *Console) erase() {
	if c.drawn {
		fmt.Fprint(c.out, "\r\x1b[K")
		c.drawn = false
	}
}

func (c *Console) draw() {
	if !c.live {
		return
	}
	fmt.Fprintf(c.out, "[%d/%d] %d failed, %s", c.done, c.total, c.failed, time.Since(c.start).Round(100*time.Millisecond))
	c.drawn = true
}

// Close erases the progress line for good.
func (c *Console) Close() {
	if c.live {
		close(c.stopTick)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.erase()
	c.live = false
}
