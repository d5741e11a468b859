package runner

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// console serialises what a run prints: whole result blocks and, on a
// terminal, one live progress line that each block first erases.
type console struct {
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

func newConsole(p *Params, total int) *console {
	c := &console{out: p.Out, verbose: p.Verbose, live: p.Progress && p.Out != nil, total: total, start: time.Now(), stopTick: make(chan struct{})}
	if c.live {
		go c.tick()
	}
	return c
}

// result prints one scenario's block and updates the progress line.
func (c *console) result(r *Result) {
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
	_, _ = c.out.Write(formatResult(r, c.verbose))
	c.draw()
}

// tick keeps the elapsed time moving while long scenarios run.
func (c *console) tick() {
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

func (c *console) erase() {
	if c.drawn {
		fmt.Fprint(c.out, "\r\x1b[K")
		c.drawn = false
	}
}

func (c *console) draw() {
	if !c.live {
		return
	}
	fmt.Fprintf(c.out, "[%d/%d] %d failed, %s", c.done, c.total, c.failed, time.Since(c.start).Round(100*time.Millisecond))
	c.drawn = true
}

// close erases the progress line for good.
func (c *console) close() {
	if c.live {
		close(c.stopTick)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.erase()
	c.live = false
}
