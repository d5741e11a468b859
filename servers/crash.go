package servers

import (
	"strings"
	"sync/atomic"
)

// Crash is how the runner's own server died when nothing asked it to: the
// panic (or fatal error) its log ends with, and the stack below it. A Go
// program's panic exits 2 and prints the panicking goroutine to stderr,
// which goes to the server's log: without this the run saw only its
// broker gone ("connection refused") and named the panic nowhere.
type Crash struct {
	What  string // "panic: runtime error: invalid memory address or nil pointer dereference"
	Stack string // the log from the panic line on
}

// CrashWatch records the crash of one server (nil until one): a server
// that runs as a Go program of its own (kfake) embeds one.
type CrashWatch struct{ crash atomic.Pointer[Crash] }

// Crashed is the server's crash, nil if it never crashed (a kill, a stop
// or a start the runner asked for is none).
func (w *CrashWatch) Crashed() *Crash { return w.crash.Load() }

// Watch waits for c to exit; if it exited while still the server's
// running process (mine: nothing took it to stop it) and its log since
// offset holds a panic, that is the server's crash.
func (w *CrashWatch) Watch(c *Child, mine func(*Child) bool, logPath string, offset int64) {
	<-c.done
	if !mine(c) {
		return
	}
	if cr := crashIn(logSince(logPath, offset)); cr != nil {
		w.crash.CompareAndSwap(nil, cr)
	}
}

// crashIn finds a Go panic or fatal error in a log, nil if none.
func crashIn(log string) *Crash {
	at := -1
	for _, mark := range []string{"panic: ", "fatal error: "} {
		if i := strings.Index(log, mark); i >= 0 && (i == 0 || log[i-1] == '\n') && (at < 0 || i < at) {
			at = i
		}
	}
	if at < 0 {
		return nil
	}
	what, _, _ := strings.Cut(log[at:], "\n")
	return &Crash{What: strings.TrimSpace(what), Stack: log[at:]}
}
