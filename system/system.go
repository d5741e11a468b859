// Package system reads a team's system file: the services a drill starts
// (the team's own relay and consumer, in any language, unchanged), the
// schema applied to each fresh database pair, and how the runner finds the
// outbox, the stream entries, the inbox and the projection in the team's
// own tables and fields.
//
// A scenario points at one with `system: <path>` (relative to the scenario
// file), or `runner run --system FILE` applies one to every scenario. The
// services reach PostgreSQL and the broker only through the runner's fault
// proxies: ${producer_db.url}, ${consumer_db.url} and ${broker.url} in their
// env are always proxy addresses.
package system

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/proxy/fault"
)

// System is one system file, loaded and checked.
type System struct {
	File     string
	Dir      string // the file's directory: services run there, schema paths start there
	Services map[string]*Service
	Schema   Schema
	// Produce is the team's producer transaction, ${…} turned into bound
	// parameters ($1, $2, …) named by ProduceArgs in order.
	Produce     string
	ProduceArgs []string
	ProducePos  diag.Pos
	Outbox      Outbox
	Stream      Stream
	Inbox       Inbox
	Projection  string // a query returning consumer, currency, amount, events
	// Brokers are the brokers the services can talk to (brokers: [redis]);
	// nil: every broker.
	Brokers []string
	Event   Event
	// DeadLetter is where the team's consumer moves an event it gives up
	// on (dead_letter: a stream, topic, subject or exchange, ${…} allowed);
	// "" when the file names none. An event the consumer published there,
	// payload kept, is dead-lettered: not lost, not stuck.
	DeadLetter string
	// Kinds are the brokers the file was read against (Load's kinds): its
	// brokers: and variants: name them, and the checks of its
	// placeholders judge against them.
	Kinds []*broker.Kind
	// Pos holds where each value of the file is, by key path: "produce",
	// "projection", "brokers", "outbox", "outbox.table", "inbox.event_id",
	// "stream.payload", "schema.producer", "event.payload", "event.amount",
	// … (At reads it).
	Pos map[string]diag.Pos
	// Groups are the services the file runs several of (replicas: N > 1),
	// each with its replicas' names, NAME-1 … NAME-N (Services holds those,
	// not NAME).
	Groups map[string][]string
}

// At is where the value at key path (as in Pos) is written; the file's
// first line when the file does not give it.
func (s *System) At(key string) diag.Pos {
	if p, ok := s.Pos[key]; ok {
		return p
	}
	return diag.Pos{File: s.File, Line: 1, Col: 1}
}

// Unsupported says why a run on broker b cannot drill this system (the
// file lists the brokers its services support, and b is not one), or "".
func (s *System) Unsupported(b string) string {
	if s.Brokers == nil || slices.Contains(s.Brokers, b) {
		return ""
	}
	return fmt.Sprintf("the system file %s supports brokers %s; this run is %s", s.File, strings.Join(s.Brokers, ", "), b)
}

// Service is one process of the team's system.
type Service struct {
	Name string
	Pos  diag.Pos
	Run  []string          // argv, run in the system file's directory
	Env  map[string]string // values may hold ${…} placeholders
	// RunPos and EnvPos are where each word of run and each value of env
	// is written, for the errors about their ${…}.
	RunPos []diag.Pos
	EnvPos map[string]diag.Pos
	Ready  string // a line containing it on stdout or stderr means ready; "" = once started
	// ReadyOn is ready: {on: …}, a boundary in a fault's grammar: the
	// service is ready once its proxies counted the first crossing of it
	// (with Ready, once both happened); nil: none is awaited. ReadyOnPos
	// is where on: is written.
	ReadyOn    *fault.Fault
	ReadyOnPos diag.Pos
	// ReadyTimeout bounds the wait for Ready and ReadyOn (ready: {timeout:
	// 60s}); 0: the runner's default, 30 s.
	ReadyTimeout time.Duration
	// Variants are, per broker, what differs on it (variants:; see On).
	Variants map[string]*Service
	// Replicas is the file's replicas: (0: not given). A service with
	// more than one is loaded as its replicas (see replicas.go): each has
	// Group, the name the file gives them, and Replica, its number from 1.
	Replicas    int
	ReplicasPos diag.Pos
	Group       string
	Replica     int
}

// Schema are the DDL files applied to each fresh producer and consumer database.
type Schema struct{ Producer, Consumer string }

// Outbox maps the reference outbox onto the team's table.
type Outbox struct {
	Table, EventID, Payload string
	// Unpublished is a SQL condition on the table true for rows the relay
	// has yet to publish (e.g. "published_at IS NULL").
	Unpublished string
}

// Stream names the entry fields that carry the event id and the payload.
type Stream struct {
	EventID, Payload       string
	EventIDPos, PayloadPos diag.Pos // where the system file names them
}

// Inbox maps the reference inbox onto the team's table.
type Inbox struct {
	Table, Consumer, EventID, Payload string
	// AppliedOrder is a column whose order is the consumer's apply order
	// (inbox.applied_order: a serial, an identity or a timestamp); "" when
	// the file names none.
	AppliedOrder string
}

// Names are the service names, sorted.
func (s *System) Names() []string {
	names := make([]string, 0, len(s.Services))
	for n := range s.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ProduceParams are the ${…} the produce statement may bind.
var ProduceParams = []string{"aggregate", "amount", "currency", "event", "from", "payload", "to", "version"}

var placeholder = lazy.Regexp(`\$\{([^}]*)\}`)

// Expand replaces every ${name} in s with vars[name]. A name vars lacks is
// an error naming it, with the closest known name.
func Expand(s string, vars map[string]string) (string, error) {
	var missing []string
	out := placeholder().ReplaceAllStringFunc(s, func(m string) string {
		name := m[2 : len(m)-1]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		known := make([]string, 0, len(vars))
		for k := range vars {
			known = append(known, k)
		}
		slices.Sort(known)
		return "", fmt.Errorf("unknown ${%s}%s; known: %s", missing[0], diag.Suggest(missing[0], known), strings.Join(known, ", "))
	}
	return out, nil
}

// bindParams turns the ${…} of a produce statement into $1, $2, … (one per
// distinct name) and returns the names in parameter order.
func bindParams(sql string) (string, []string, error) {
	var names []string
	var bad string
	out := placeholder().ReplaceAllStringFunc(sql, func(m string) string {
		name := m[2 : len(m)-1]
		if !slices.Contains(ProduceParams, name) {
			if bad == "" {
				bad = name
			}
			return m
		}
		i := slices.Index(names, name)
		if i < 0 {
			names = append(names, name)
			i = len(names) - 1
		}
		return fmt.Sprintf("$%d", i+1)
	})
	if bad != "" {
		return "", nil, fmt.Errorf("unknown ${%s}%s; produce binds %s", bad, diag.Suggest(bad, ProduceParams), strings.Join(ProduceParams, ", "))
	}
	return out, names, nil
}
