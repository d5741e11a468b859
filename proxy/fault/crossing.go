package fault

import (
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/diag"
)

// Meet is how a trigger on a crossing's operation, at one boundary, meets
// the crossing: whether the trigger's count moves there, and whether it
// can strike there.
type Meet int

const (
	// Strikes: the trigger counts the crossing and can strike it.
	Strikes Meet = iota
	// Counted: the trigger counts the crossing, but struck there it fails
	// as unclassifiable (the broker answers nothing to hold: a publish on
	// an AMQP channel not in confirm mode, a NATS ack without a reply
	// subject, a Produce with acks=0).
	Counted
	// Passed: the trigger does not count it (a NATS delivery for
	// request(deliver), a pull request for reply(deliver)).
	Passed
)

// Crossing is one boundary a service's connection crossed, as its proxy
// saw it: a commit or a statement batch that wrote tables (a database
// link), or a broker operation with the kind of its answer. runner
// explore builds its boundary map and its fault points from them; a
// Trigger meets one as the proxy would count it (Meets).
type Crossing struct {
	// Service is whose connection it was, Start the start step that
	// started the process; Process is the run's Nth service process
	// (start steps and the supervisor's restarts alike), from 1; Restart
	// is 0 for a start step's own process, k for the supervisor's k-th
	// restart of it. The runner fills them; a proxy leaves them zero.
	Service          string
	Start            diag.Pos
	Process, Restart int
	Link             Link
	// Boundary is a database crossing's, Commit or Statement; 0 on the
	// broker, whose operation crosses request(Op) and reply(Op) alike, as
	// Request and Response say.
	Boundary Boundary
	Tables   []string // what a commit or statement wrote, bare names, sorted
	// Unattributed: a commit whose tables the proxy did not learn (its
	// observer was given up).
	Unattributed bool
	// Op is, on the broker, what a trigger names to strike it on this
	// broker: a Redis command (XADD, XREADGROUP, …), the neutral publish,
	// deliver, ack, or a native operation (NATS -NAK, AMQP basic.nack,
	// Kafka EndTxn).
	Op string
	// Command is, on a database, a statement's command as its reply's tag
	// names it (INSERT, UPDATE, …), where the proxy held it; never SQL.
	Command string
	// Reply is the kind of the broker's answer: "entries" (a read that
	// handed out entries), "empty" (one that handed out nothing), "ok",
	// "error", "none" (no answer reached it), "" (the broker answers
	// nothing to this operation, or it is a request whose answer is a
	// crossing of its own).
	Reply string
	// Request and Response say how broker.request(Op) and broker.reply(Op)
	// meet it; a point's nth is its count among the crossings its trigger
	// counts, as the proxy counts them.
	Request, Response Meet
	// Setup: a connection's setup, which gets no point.
	Setup bool
	Fault string // the trigger that struck here, "" for none
	At    time.Time
}

// Label names the crossing's kind as runner explore's boundary map shows
// it: "consumer_db.commit(table=inbox,projection)",
// "consumer_db.commit(no writes)", "broker.XREADGROUP→empty".
func (c Crossing) Label() string {
	place := c.Link.String() + "." + c.Boundary.String()
	switch {
	case c.Link == Broker:
		return c.brokerLabel()
	case c.Unattributed:
		return place + "(unattributed)"
	case len(c.Tables) == 0:
		return place + "(no writes)"
	}
	return c.DatabaseTrigger(strings.Join(c.Tables, ",")).On()
}

// brokerLabel names a broker crossing by the triggers that strike it:
// "broker.XADD→ok" (request(XADD) and reply(XADD) both), and where only
// one of them can, "broker.request(deliver)" (a NATS pull request),
// "broker.reply(deliver)→entries" (a NATS delivery), "broker.request(ack)"
// (an AMQP basic.ack: the broker answers nothing).
func (c Crossing) brokerLabel() string {
	l := "broker." + c.Op
	switch {
	case c.Request == Strikes && c.Response != Strikes:
		l = c.Trigger(Request).On()
	case c.Request != Strikes && c.Response == Strikes:
		l = c.Trigger(Reply).On()
	}
	if c.Reply != "" {
		l += "→" + c.Reply
	}
	return l
}

// Trigger is the broker trigger on c's operation at boundary b
// (broker.request(XADD)), with how it meets c.
func (c Crossing) Trigger(b Boundary) Trigger {
	return Trigger{Link: Broker, Boundary: b, Filter: Filter{Command: c.Op}}
}

// Meet is how broker boundary b meets the crossing.
func (c Crossing) Meet(b Boundary) Meet {
	if b == Reply {
		return c.Response
	}
	return c.Request
}

// Meets reports whether t counts c, as its proxy would: a broker trigger
// on c's operation where its boundary does not pass it by, a database
// trigger on c's link and boundary whose table c wrote. Broker filters
// (topic, subject, …) are the proxies' to apply: a trigger with one is
// never said to count c.
func (t Trigger) Meets(c Crossing) bool {
	if t.Link != c.Link {
		return false
	}
	if t.Link == Broker {
		return t.Filter.Broker() == "" && t.Filter.Command == c.Op && c.Meet(t.Boundary) != Passed
	}
	return t.Boundary == c.Boundary && t.Wrote(c.Tables)
}

// Wrote reports whether a transaction or batch that wrote tables matches
// t's table filter (a database link): by name or schema.name, in any
// case; no filter matches any write (and, for Commit, any commit).
func (t Trigger) Wrote(tables []string) bool {
	if t.Filter.Table == "" {
		return t.Boundary == Commit || len(tables) > 0
	}
	return slices.ContainsFunc(tables, t.Filter.TableIs)
}

// TableIs reports whether table (as a server names it, bare or
// schema.name) is the one the filter names, by name or schema.name, in
// any case.
func (f Filter) TableIs(table string) bool {
	table, want := strings.ToLower(table), strings.ToLower(f.Table)
	return table == want || strings.HasSuffix(table, "."+want)
}

// DatabaseTrigger is the trigger on a database crossing's link and
// boundary, filtered by table ("" for none).
func (c Crossing) DatabaseTrigger(table string) Trigger {
	return Trigger{Link: c.Link, Boundary: c.Boundary, Filter: Filter{Table: table}}
}
