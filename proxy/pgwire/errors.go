package pgwire

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"sync"
	"time"
	"unicode/utf8"
)

// A stuck consumer's witness says what its database answered it while it
// made no progress ("23514 new row … violates check constraint … ×6"):
// the proxy keeps a tally of the server's ErrorResponses to its clients,
// bounded in what a hostile client can make it hold.

// Tally bounds: distinct (SQLSTATE, message) pairs kept, and the bytes of a
// message kept of each; what comes after is counted, not kept.
const (
	maxErrorKinds   = 16
	maxErrorMessage = 200
	// maxErrorTimes bounds the times kept of when errors came (a relay's
	// failed statement explains another relay publishing its row again);
	// past it only that there were more is kept.
	maxErrorTimes = 1024
)

type errorKey struct{ code, msg string }

// errorTally counts the server's errors by kind, in first-seen order.
type errorTally struct {
	mu     sync.Mutex
	counts map[errorKey]int
	order  []errorKey
	other  int // errors of kinds past maxErrorKinds
	times  []time.Time
	more   bool // errors came past maxErrorTimes
}

func (t *errorTally) add(code, msg string) {
	if len(msg) > maxErrorMessage {
		cut := maxErrorMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) { // never split a character
			cut--
		}
		msg = msg[:cut] + "…"
	}
	k := errorKey{code, msg}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.times) < maxErrorTimes {
		t.times = append(t.times, time.Now())
	} else {
		t.more = true
	}
	if t.counts == nil {
		t.counts = map[errorKey]int{}
	}
	if _, seen := t.counts[k]; !seen && len(t.order) >= maxErrorKinds {
		t.other++
		return
	}
	if t.counts[k] == 0 {
		t.order = append(t.order, k)
	}
	t.counts[k]++
}

// Errors are the errors the server answered the proxy's clients with, the
// most frequent first: "23514 new row … ×6". The drill's own injected
// errors are not among them: they never came from the server.
func (p *Proxy) Errors() []string {
	t := &p.errs
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := append([]errorKey(nil), t.order...)
	sort.SliceStable(keys, func(i, j int) bool { return t.counts[keys[i]] > t.counts[keys[j]] })
	out := make([]string, 0, len(keys)+1)
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s %s ×%d", k.code, k.msg, t.counts[k]))
	}
	if t.other > 0 {
		out = append(out, fmt.Sprintf("%d more of other kinds", t.other))
	}
	return out
}

// ErrorTimes are when the server answered the proxy's clients with an
// error, in order (the first maxErrorTimes); more reports errors past
// them, whose times were not kept. Injected errors are not among them.
func (p *Proxy) ErrorTimes() (times []time.Time, more bool) {
	t := &p.errs
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]time.Time(nil), t.times...), t.more
}

// ServerPorts are the local ports of its open connections to the server:
// the client_port pg_stat_activity shows for their backends (a stuck
// verdict's witness says what each waits on).
func (p *Proxy) ServerPorts() []int {
	var out []int
	p.live.Range(func(_, v any) bool {
		c := v.(*conn)
		c.serverMu.Lock()
		if c.server != nil {
			if a, ok := c.server.LocalAddr().(*net.TCPAddr); ok {
				out = append(out, a.Port)
			}
		}
		c.serverMu.Unlock()
		return true
	})
	slices.Sort(out)
	return out
}

// OpenConnections is how many of its clients' connections are open now.
func (p *Proxy) OpenConnections() int {
	n := 0
	p.live.Range(func(_, _ any) bool { n++; return true })
	return n
}
