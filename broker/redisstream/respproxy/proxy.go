// Package respproxy is Redis's protocol proxy as the runner uses it
// (broker.ProxyKind): a proxy/resp proxy in front of each service's Redis
// connection, its faults named by the neutral operations (publish, deliver,
// ack) or a Redis command, and what crossed it read as the history's wire.
package respproxy

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/resp"
)

// Kind is Redis's protocol proxy (proxy/resp). The neutral
// operations are Redis commands: publish is XADD, deliver XREADGROUP (a
// takeover's XCLAIM or XAUTOCLAIM is named as itself), ack XACK.
type Kind struct{}

var neutral = map[string]string{"publish": "XADD", "deliver": "XREADGROUP", "ack": "XACK"}

// command is what may name a Redis command, CMD or CMD.SUB, in any case.
var command = lazy.Regexp(`^[A-Za-z][A-Za-z_-]*(\.[A-Za-z][A-Za-z_-]*)?$`)

// Operations are the neutral ones: Redis's commands are Operation's.
func (Kind) Operations() []string { return []string{"publish", "deliver", "ack"} }

// Operation is a neutral operation as it is, else a Redis command upper
// case, checked against Redis's commands (resp.KnownCommand).
func (Kind) Operation(op string) (string, error) {
	if _, ok := neutral[op]; ok {
		return op, nil
	}
	if !command().MatchString(op) {
		return "", fmt.Errorf("no Redis command %s (want publish, deliver, ack or one such as XADD)", op)
	}
	cmd := strings.ToUpper(op)
	if err := resp.KnownCommand(cmd); err != nil {
		return "", err
	}
	return cmd, nil
}

// Compile is t as proxy/resp arms it: the neutral operations as the
// commands they are, no filter but the command, the action where Redis
// applies it.
func (Kind) Compile(t fault.Trigger) (any, error) {
	if f := t.Filter.Broker(); f != "" {
		return nil, fmt.Errorf("the Redis proxy filters by command only, not by %s", f)
	}
	if cmd, ok := neutral[t.Filter.Command]; ok {
		t.Filter.Command = cmd
	}
	return fault.Native(resp.Compile(t))
}

func (Kind) Listen(url string) (broker.Proxy, error) {
	up, err := broker.FirstHost(url, "6379")
	if err != nil {
		return nil, err
	}
	p, err := resp.ListenWith(up, resp.DefaultLimits())
	if err != nil {
		return nil, err
	}
	via, err := broker.ViaURL(url, p.Addr())
	if err != nil {
		p.Close()
		return nil, err
	}
	return &proxy{p: p, url: via}, nil
}

type proxy struct {
	p   *resp.Proxy
	url string
}

func (x *proxy) URL() string     { return x.url }
func (x *proxy) Address() string { return x.p.Addr() }
func (x *proxy) Close()          { x.p.Close() }

func (x *proxy) Arm(c fault.Compiled) (broker.Strike, error) {
	n, ok := c.Native.(resp.Checked)
	if !ok {
		return nil, fmt.Errorf("%s: not compiled for the Redis proxy", c.On())
	}
	return x.p.ArmChecked(n, c.Action.Kill)
}

// Wire maps the relayed XADDs, deliveries and XACKs; the stream mapping
// names the entry fields of the event id and the payload.
func (x *proxy) Wire(m broker.WireMap) broker.Wire {
	pubs, dels, acks := x.p.History()
	pass := x.passes() // after History: every command it read is there
	var w broker.Wire
	for _, p := range pubs {
		op := "XADD"
		if p.Copy { // the trace says whose it was
			op = "XADD (the drill's duplicate of the one before)"
		}
		w.Publishes = append(w.Publishes, broker.WireMsg{At: p.At, Op: op, EntryID: p.ID, EventID: p.Fields[m.EventID], Payload: p.Fields[m.Payload],
			Dest: p.Stream, Fields: slices.Sorted(maps.Keys(p.Fields)), Pass: pass[p.At]})
	}
	// An XACK acknowledges the latest delivery of each id to its group
	// before it: merge both in wire order.
	latest := map[[2]string]int{}
	i := 0
	for _, a := range acks {
		for ; i < len(dels) && !dels[i].At.After(a.At); i++ {
			d := dels[i]
			latest[[2]string{d.Group, d.ID}] = len(w.Deliveries)
			w.Deliveries = append(w.Deliveries, broker.WireMsg{At: d.At, Op: d.Command, EntryID: d.ID, Dest: d.Stream, Group: d.Group, EventID: d.Fields[m.EventID], Payload: d.Fields[m.Payload], Pass: pass[d.At]})
		}
		// Redis counts what an XACK acknowledged, not which: only a count
		// of all its ids says each one was (never a guess).
		if n, _ := strconv.Atoi(a.Acked); n == len(a.IDs) {
			for _, id := range a.IDs {
				if j, ok := latest[[2]string{a.Group, id}]; ok {
					w.Deliveries[j].Acked = true
				}
			}
		}
	}
	for _, d := range dels[i:] {
		w.Deliveries = append(w.Deliveries, broker.WireMsg{At: d.At, Op: d.Command, EntryID: d.ID, Dest: d.Stream, Group: d.Group, EventID: d.Fields[m.EventID], Payload: d.Fields[m.Payload], Pass: pass[d.At]})
	}
	w.Dropped = x.p.Dropped()
	return w
}

// passes are broker.PassesWithCopies of the commands the proxy recorded.
func (x *proxy) passes() map[time.Time]int {
	es := x.p.Events()
	return broker.PassesWithCopies(len(es), func(i int) time.Time { return es[i].At }, func(i int) bool { return es[i].Fault != "" }, func(i int) bool { return es[i].Copy })
}

func (x *proxy) Connections() int { return x.p.Connections() }

// IdlePoll is when the service last sent an XREADGROUP of new entries
// that handed out nothing (broker.Idler).
func (x *proxy) IdlePoll() time.Time { return x.p.IdlePoll() }

// Events are the commands the proxy relayed, each with its reply, in the
// order it recorded them.
func (x *proxy) Events() []resp.Event { return x.p.Events() }

// Crossings are the commands the proxy relayed, each named by its command
// (request(CMD) and reply(CMD) count every one) with the kind of its
// reply: runner explore's broker boundaries.
func (x *proxy) Crossings() []fault.Crossing {
	var out []fault.Crossing
	for _, e := range x.p.Events() {
		if len(e.Command) == 0 {
			continue
		}
		cmd := strings.ToUpper(e.Command[0])
		out = append(out, fault.Crossing{Link: fault.Broker, Op: cmd, Reply: replyKind(cmd, e.Reply), Fault: e.Fault, At: e.At})
	}
	return out
}

// replyKind sorts a reply: whether a read handed out anything is what
// tells an idle poll from one that carried work.
func replyKind(cmd string, v resp.Value) string {
	switch {
	case v.Type == 0:
		return "none"
	case v.Err():
		return "error"
	case v.Null:
		return "empty"
	}
	switch cmd {
	case "XREADGROUP", "XCLAIM", "XRANGE", "XREVRANGE", "XREAD":
		if len(v.Elems) == 0 {
			return "empty"
		}
		return "entries"
	case "XPENDING": // the summary [count, first, last, consumers], or the entries
		if len(v.Elems) == 0 || v.Elems[0].Str == "0" && len(v.Elems) == 4 && v.Elems[1].Null {
			return "empty"
		}
		return "entries"
	case "XAUTOCLAIM": // [next, entries, deleted]
		if len(v.Elems) < 2 || len(v.Elems[1].Elems) == 0 {
			return "empty"
		}
		return "entries"
	}
	return "ok"
}

// ReadGroups are the groups the service's connections named in
// XREADGROUP, XCLAIM or XAUTOCLAIM, and the min-idle of its claims.
func (x *proxy) ReadGroups() ([]string, map[string]time.Duration) {
	var gs []string
	claims := map[string]time.Duration{}
	for _, e := range x.p.Events() {
		if len(e.Command) < 4 {
			continue
		}
		g := ""
		switch strings.ToUpper(e.Command[0]) {
		case "XREADGROUP":
			if strings.EqualFold(e.Command[1], "GROUP") {
				g = e.Command[2]
			}
		case "XCLAIM", "XAUTOCLAIM": // key group consumer min-idle-time ...
			g = e.Command[2]
			if len(e.Command) > 4 {
				if ms, err := strconv.ParseInt(e.Command[4], 10, 64); err == nil && ms >= 0 {
					claims[g] = max(claims[g], time.Duration(ms)*time.Millisecond)
				}
			}
		}
		if g != "" && !slices.Contains(gs, g) {
			gs = append(gs, g)
		}
	}
	slices.Sort(gs)
	return gs, claims
}

// Dropped is how many events the proxy's record left out, full.
func (x *proxy) Dropped() int64 { return x.p.Dropped() }
