package fault

import (
	"fmt"
	"slices"
	"strings"
)

// A Trigger is one fault from the system file to the proxy that strikes
// it, in one type. A scenario's start step writes it as
//
//	fault: {on: consumer_db.commit(table=inbox), nth: 1, do: kill}
//	fault: {on: broker.reply(XADD), nth: 2, do: delay(250ms)}
//
// This package owns it from end to end: Parse reads that text once (the
// link and boundary names below, a table name, the action; the broker's
// operation in the words of each broker's proxy, its Dialect), Compile
// turns it once into what one broker's proxy arms or why that proxy does
// not take it, and Meets and Wrote say which crossings it counts. The
// runner hands a database link's Trigger as it is to its proxy
// (proxy/pgwire), and a broker's Compiled to the broker's.
//
// For a proxy of a new protocol, on the Broker link:
//   - match Boundary (Request: strike before the client's request reaches
//     the server; Reply: strike with the server's reply held) and
//     Filter.Command, which names a request of the protocol in the words
//     its users know (Redis: XADD, XGROUP.CREATE for a subcommand; say in
//     the proxy's doc what a Kafka or AMQP command is, e.g. an API name or
//     method). Its broker's ProxyKind is its Vocabulary: the list of those
//     names, so that a misspelt one is an error, not a fault that never
//     fires, and the compiler of its own trigger;
//   - strike with the Armed's Hold (kill, cut, delay) or the protocol's own
//     error for Error, and report what it cannot attribute exactly as an
//     *Unclassifiable;
//   - apply Duplicate and Drop itself (Hold does not) where they are exact
//     on the protocol, and refuse them in its compiler elsewhere, saying
//     where they apply (see each proxy's duplicate.go);
//   - arm what its compiler made as it is: it is never checked again.
//
// Only NewArmed checks what the runner adds past the parser (the function
// a Kill calls).
type Trigger struct {
	Link     Link
	Boundary Boundary
	Filter   Filter
	Nth      int // 1 = the first crossing that matches; 0 counts as 1
	Action   Action
	// Optional: the scenario does not fail when it never struck (the
	// proxy ignores it; sysrun's Unstruck reads it).
	Optional bool
}

// Link is a connection of a service that a proxy sits on.
type Link int

const (
	// ProducerDB is the producer's PostgreSQL (proxy/pgwire).
	ProducerDB Link = iota + 1
	// ConsumerDB is the consumer's PostgreSQL (proxy/pgwire).
	ConsumerDB
	// Broker is the broker (proxy/resp for Redis).
	Broker
)

var linkNames = map[Link]string{ProducerDB: "producer_db", ConsumerDB: "consumer_db", Broker: "broker"}

func (l Link) String() string {
	if n, ok := linkNames[l]; ok {
		return n
	}
	return fmt.Sprintf("Link(%d)", int(l))
}

// Database reports whether l is one of the PostgreSQL links.
func (l Link) Database() bool { return l == ProducerDB || l == ConsumerDB }

// Boundaries are the boundaries of l, as the system file lists them.
func (l Link) Boundaries() []Boundary {
	switch {
	case l.Database():
		return []Boundary{Commit, Statement}
	case l == Broker:
		return []Boundary{Reply, Request}
	}
	return nil
}

// LinkNamed is the link the system file names name.
func LinkNamed(name string) (Link, bool) {
	for l, n := range linkNames {
		if n == name {
			return l, true
		}
	}
	return 0, false
}

// LinkNames are the links' names, sorted.
func LinkNames() []string {
	var out []string
	for _, n := range linkNames {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Boundary is where on a link's traffic a fault strikes.
type Boundary int

const (
	// Commit (a database link) is the reply to a COMMIT of a transaction
	// that wrote Filter.Table (any table when it is empty; then any commit).
	Commit Boundary = iota + 1
	// Statement (a database link) is the reply to a batch of statements
	// (a simple query, or an extended-protocol batch up to its Sync) that
	// wrote Filter.Table inside a transaction block.
	Statement
	// Request (the broker link) is before the command Filter.Command
	// reaches the broker: the broker never runs it.
	Request
	// Reply (the broker link) is once the broker ran Filter.Command, with
	// its reply held.
	Reply
)

// The broker-neutral operations every broker's proxy names the same:
// what a relay's publish, a consumer's delivery and its acknowledgement
// are on that broker (XADD, Produce, a JetStream publish, basic.publish
// with its confirm; XREADGROUP, Fetch, …; XACK, OffsetCommit, +ACK,
// basic.ack).
const (
	OpPublish = "publish"
	OpDeliver = "deliver"
	OpAck     = "ack"
)

var boundaryNames = map[Boundary]string{Commit: "commit", Statement: "statement", Request: "request", Reply: "reply"}

func (b Boundary) String() string {
	if n, ok := boundaryNames[b]; ok {
		return n
	}
	return fmt.Sprintf("Boundary(%d)", int(b))
}

// Boundary is l's boundary named name.
func (l Link) Boundary(name string) (Boundary, bool) {
	for _, b := range l.Boundaries() {
		if b.String() == name {
			return b, true
		}
	}
	return 0, false
}

// BoundaryNames are the names of l's boundaries.
func (l Link) BoundaryNames() []string {
	var out []string
	for _, b := range l.Boundaries() {
		out = append(out, b.String())
	}
	return out
}

// Filter narrows a boundary; which field applies depends on the link.
type Filter struct {
	// Table (a database link) is the table the transaction or statements
	// wrote, by name or schema.name; "" matches any.
	Table string
	// Command (the broker link) is the operation the boundary waits for,
	// always given: a neutral one (publish, deliver, ack), a Redis command
	// upper case (CMD or CMD.SUB for a subcommand), or another broker's own
	// as that broker spells it (Produce, basic.ack, +ACK).
	Command string
	// Broker filters (the broker link), each "" for any; a broker's proxy
	// refuses one it cannot apply: Kafka's topic and group, NATS's
	// subject, AMQP's exchange, routing_key and queue.
	Topic, Group, Subject, Exchange, RoutingKey, Queue string
}

// BrokerFilters are the broker filters' names, in the order On writes
// them, with their values.
func (f Filter) BrokerFilters() [][2]string {
	return [][2]string{{"topic", f.Topic}, {"group", f.Group}, {"subject", f.Subject}, {"exchange", f.Exchange}, {"routing_key", f.RoutingKey}, {"queue", f.Queue}}
}

// Broker is the broker filters given, as On writes them ("" for none).
func (f Filter) Broker() string {
	var out []string
	for _, kv := range f.BrokerFilters() {
		if kv[1] != "" {
			out = append(out, kv[0]+"="+kv[1])
		}
	}
	return strings.Join(out, ", ")
}

// SetBroker sets the broker filter named name; false for no such filter.
func (f *Filter) SetBroker(name, value string) bool {
	ptrs := map[string]*string{"topic": &f.Topic, "group": &f.Group, "subject": &f.Subject, "exchange": &f.Exchange, "routing_key": &f.RoutingKey, "queue": &f.Queue}
	p, ok := ptrs[name]
	if ok {
		*p = value
	}
	return ok
}

// On is the trigger's place as the system file writes it (its on:):
// consumer_db.commit(table=inbox), producer_db.statement(),
// broker.reply(XADD).
func (t Trigger) On() string {
	switch {
	case t.Link == Broker && t.Filter.Broker() != "":
		return fmt.Sprintf("%s.%s(%s, %s)", t.Link, t.Boundary, t.Filter.Command, t.Filter.Broker())
	case t.Link == Broker:
		return fmt.Sprintf("%s.%s(%s)", t.Link, t.Boundary, t.Filter.Command)
	case t.Filter.Table == "":
		return fmt.Sprintf("%s.%s()", t.Link, t.Boundary)
	}
	return fmt.Sprintf("%s.%s(table=%s)", t.Link, t.Boundary, t.Filter.Table)
}

// String is the whole fault: consumer_db.commit(table=inbox) nth=1 do=kill.
func (t Trigger) String() string {
	return fmt.Sprintf("%s nth=%d do=%s", t.On(), max(t.Nth, 1), t.Action)
}
