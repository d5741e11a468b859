package report

import (
	"io"
	"sync"

	"github.com/outboxdrill/runner/internal/progress"
)

// Console serialises what a run prints: whole result blocks, each printed
// above the run's progress line (on a terminal), which counts it.
type Console struct {
	mu       sync.Mutex
	out      io.Writer
	verbose  bool
	progress *progress.Reporter // nil: none
}

// NewConsole prints to out the results of a run of total scenarios: each
// result's block (every step's trace when verbose); p, if not nil, is told
// of the total and of each result.
func NewConsole(out io.Writer, verbose bool, p *progress.Reporter, total int) *Console {
	p.Add(total)
	return &Console{out: out, verbose: verbose, progress: p}
}

// Result prints one scenario's block and counts it in the progress.
func (c *Console) Result(r *Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	bad := 0
	if !r.Passed() {
		bad = 1
	}
	if c.out != nil {
		c.progress.Above(func() { _, _ = c.out.Write(FormatResult(r, c.verbose)) })
	}
	c.progress.Done(1, bad)
}
