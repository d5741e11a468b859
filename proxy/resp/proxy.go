// Package resp is a Redis protocol (RESP2 and RESP3) proxy that strikes a
// fault at an exact command boundary of a service's connection: before a
// command reaches Redis (request), or with its reply held (reply). The
// service needs no code change: it connects to the proxy's address.
//
// Pipelining is made deterministic by a barrier: when a reply is held, the
// proxy reads no further command from that client until the fault has
// struck, so nothing the client pipelined after the command reaches Redis
// first; when a request fault strikes, the replies to what was sent before
// it reach the client first.
//
// The proxy records what it relayed (commands with their replies) so a
// drill can check the history the service itself produced: its publishes
// (XADD), deliveries (XREADGROUP, XCLAIM, XAUTOCLAIM) and acks (XACK).
// Those it keeps whole; of any other command only its name and its
// reply's kind (so never the arguments of AUTH and HELLO), and only the
// first MaxOtherEvents of them.
package resp

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// A trigger on the broker link (fault.Broker) strikes at the Nth command
// named Filter.Command (e.g. "XADD"; "XGROUP.CREATE" names a subcommand):
// before it is forwarded (fault.Request: Redis never runs it) or once
// Redis ran it, with its reply held (fault.Reply). Error, at either
// boundary, does not forward the command and answers the client with an
// -ERR reply. Duplicate and Drop: duplicate.go.

// matches reports whether a command (its words) is t's.
func matches(t fault.Trigger, cmd []string) bool {
	if len(cmd) == 0 {
		return false
	}
	name, sub, hasSub := strings.Cut(t.Filter.Command, ".")
	if !strings.EqualFold(cmd[0], name) {
		return false
	}
	return !hasSub || len(cmd) > 1 && strings.EqualFold(cmd[1], sub)
}

// Armed is a trigger waiting on a proxy.
type Armed struct {
	*fault.Armed
	Trigger fault.Trigger
}

// Event is one command the proxy relayed (or failed), with its reply.
type Event struct {
	Conn int
	// Command is the command's words: of a command the history does not
	// read, its name alone (so never AUTH's or HELLO's arguments).
	Command []string
	// Reply is zero when the command never got one; of a command the
	// history does not read, its kind alone (its text too for an error).
	Reply Value
	Fault string // the trigger that struck here, "" for none
	// Copy: the proxy's own second send of a command a duplicate struck
	// (Redis's reply to it reached no client): the service sent it once.
	Copy bool
	At   time.Time
}

// Proxy listens on a loopback port and relays each client connection to
// the upstream Redis.
type Proxy struct {
	upstream string
	ln       *listen.Listener
	others   atomic.Int64 // events of commands the history does not read
	idle     atomic.Int64 // IdlePoll, unix nanoseconds
	lim      Limits
	acct     *listen.Account // what all its clients make it hold

	fault.Registry[*Armed, Event]
}

// Listen starts a proxy to upstream ("host:port") on 127.0.0.1, with
// DefaultLimits.
func Listen(upstream string) (*Proxy, error) { return ListenWith(upstream, DefaultLimits()) }

// ListenWith starts a proxy with limits of its own (a cap left at 0 is
// its default).
func ListenWith(upstream string, lim Limits) (*Proxy, error) {
	listen.Default(&lim.MaxOtherEvents, MaxOtherEvents)
	p := &Proxy{upstream: upstream, lim: lim, acct: lim.Account()}
	p.Bound(lim.RecordBytes)
	ln, err := listen.Serve(listen.Protocol{
		Open:   func(id int, nc net.Conn) listen.Conn { return newConn(p, id, nc) },
		Serve:  func(c listen.Conn) { c.(*conn).serve() },
		Refuse: refuse,
	})
	if err != nil {
		return nil, fmt.Errorf("resp proxy: %w", err)
	}
	p.ln = ln
	return p, nil
}

// refuse answers a client over the proxy's connection cap as Redis answers
// one over its maxclients.
func refuse(nc net.Conn, _ int) { _, _ = nc.Write([]byte("-ERR max number of clients reached\r\n")) }

// Connections is how many client connections the proxy has taken so far:
// whether the service uses this link at all.
func (p *Proxy) Connections() int { return p.ln.Accepted() }

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr() }

// Close stops listening, closes every relayed connection and waits.
func (p *Proxy) Close() error { return p.ln.Close() }

// Checked is a broker trigger Compile accepted: ArmChecked arms it as it
// is, never checking it again.
type Checked struct{ t fault.Trigger }

// Compile checks t for this proxy: the broker link's, its action where
// Redis applies it (CheckAction).
func Compile(t fault.Trigger) (Checked, error) {
	if t.Link != fault.Broker {
		return Checked{}, fmt.Errorf("%s is not the broker link's trigger", t.On())
	}
	if err := CheckAction(t); err != nil {
		return Checked{}, err
	}
	return Checked{t}, nil
}

// Arm adds a trigger of the broker link; it applies to every connection
// through this proxy.
func (p *Proxy) Arm(t fault.Trigger) (*Armed, error) {
	c, err := Compile(t)
	if err != nil {
		return nil, fmt.Errorf("resp: %w", err)
	}
	return p.ArmChecked(c, t.Action.Kill)
}

// ArmChecked arms a compiled trigger, kill the function its Kill calls.
func (p *Proxy) ArmChecked(c Checked, kill func() error) (*Armed, error) {
	t := c.t
	t.Action.Kill = kill
	fa, err := fault.NewArmed(t.Action, t.Nth)
	if err != nil {
		return nil, fmt.Errorf("resp: %w", err)
	}
	a := &Armed{Armed: fa, Trigger: t}
	p.Add(a)
	return a, nil
}

// strikeOn counts cmd against the waiting triggers and returns the one to
// strike now, if any.
func (p *Proxy) strikeOn(cmd []string) *Armed {
	for _, a := range p.Waiting() {
		if matches(a.Trigger, cmd) && a.Take() {
			return a
		}
	}
	return nil
}

// failOn fails the waiting triggers that match cmd.
func (p *Proxy) failOn(cmd []string, err error) {
	for _, a := range p.Waiting() {
		if matches(a.Trigger, cmd) {
			a.Fail(err)
		}
	}
}

// noteIdle notes an idle poll: an XREADGROUP of new entries only (every
// id ">") whose reply handed out nothing. IdlePoll says when the latest
// one was sent.
func (p *Proxy) noteIdle(k *call, v Value) {
	if len(k.cmd) == 0 || !strings.EqualFold(k.cmd[0], "XREADGROUP") || v.Err() || v.Type == 0 || !v.Null && len(v.Elems) > 0 {
		return
	}
	i := slices.IndexFunc(k.cmd, func(w string) bool { return strings.EqualFold(w, "STREAMS") })
	if i < 0 || (len(k.cmd)-i-1)%2 != 0 {
		return
	}
	for _, id := range k.cmd[i+1+(len(k.cmd)-i-1)/2:] {
		if id != ">" {
			return // a read of its own pending entries
		}
	}
	for at := k.sent.UnixNano(); ; {
		old := p.idle.Load()
		if old >= at || p.idle.CompareAndSwap(old, at) {
			return
		}
	}
}

// IdlePoll is when the latest idle poll was sent (zero: none yet): an
// XREADGROUP of new entries, sent then, that handed out nothing. A client
// that sent one after the state last changed had finished with what it
// held before it, and found nothing new (settling's evidence of idle).
func (p *Proxy) IdlePoll() time.Time {
	if n := p.idle.Load(); n > 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// MaxOtherEvents bounds the events the proxy keeps of the commands the
// history does not read: whatever a client sends is recorded, and a
// client in a loop would otherwise grow the record without bound. The
// first 65536 (with a trigger's strikes, always kept) are plenty to tell
// what a service did. The default of Limits.MaxOtherEvents.
const MaxOtherEvents = 1 << 16

// historyReads are the commands whose events the history reads whole.
var historyReads = map[string]bool{"XADD": true, "XACK": true, "XREADGROUP": true, "XCLAIM": true, "XAUTOCLAIM": true}

func (p *Proxy) record(e Event) {
	e.At = time.Now()
	if len(e.Command) > 0 && !historyReads[strings.ToUpper(e.Command[0])] {
		if p.others.Add(1) > p.lim.MaxOtherEvents && e.Fault == "" {
			return
		}
		// Copies: the event must not keep the command's arguments, or a
		// large reply, alive behind a short slice.
		e.Command = []string{strings.Clone(e.Command[0][:min(len(e.Command[0]), 64)])}
		r := Value{Type: e.Reply.Type, Null: e.Reply.Null, Streamed: e.Reply.Streamed}
		if e.Reply.Err() {
			r.Str = strings.Clone(e.Reply.Str[:min(len(e.Reply.Str), 512)])
		}
		e.Reply = r
	}
	p.Record(e)
}

// RecordSize is what the event keeps: its words and its reply (fault.Sized).
func (e Event) RecordSize() (int, bool) {
	n := 0
	for _, w := range e.Command {
		n += 16 + len(w)
	}
	return n + e.Reply.size(), e.Fault != ""
}

// size is what v holds in memory, its elements too.
func (v Value) size() int {
	n := 48 + len(v.Str)
	for _, el := range v.Elems {
		n += el.size()
	}
	return n
}
