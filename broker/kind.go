package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"unicode/utf8"
)

// Kind is one broker as the runner knows it: everything that would
// otherwise be spread over the CLI, the probe, clean, the scenario language,
// the test servers and the reports. A broker package declares its Kind
// (kind.go) and broker/kinds registers it in its one list; every other
// package loops over Kinds.
//
// Layering, and why: Kind lives here, in package broker, which imports
// nothing of this module, so every package may read the registry — steps
// and system (broker names), scenario (a kind's options key), servers
// (managed dir kinds), report (capabilities, mechanisms), runner and cmd
// (flags, probe, open, clean). A broker package imports broker and servers
// (to start its own server) and never scenario, steps or runner: the
// runner reaches it through Start, Open and Conn, and a scenario reaches it
// as a Scenario value. broker/kinds imports the broker packages; packages
// that need the names (system, steps) import broker/kinds for its side
// effect. servers and internal/testservers must not (a broker package's own
// tests import them: a cycle), so they read the registry at call time or
// take a *Kind.
type Kind struct {
	// Name is the --broker value, the key of a per-broker override in an
	// expect map and of the kind's own scenario key: "kafka".
	Name string
	// Title is the server in short messages: "Kafka" ("needs the runner's
	// own Kafka process").
	Title string
	// Product is the broker in prose: "NATS JetStream".
	Product string

	// Flag is the name of the CLI flag of its server's URL (--kafka), Env
	// the environment variable that flag defaults to.
	Flag, Env string
	// FlagUsage names the server a URL flag points at, its argument in
	// backquotes as package flag wants: "the Kafka cluster at
	// `HOST:PORT`[,HOST:PORT...]". run says "use …", clean "clean …".
	FlagUsage string
	// Own is what the runner starts when no URL is given: "one", "kfake".
	Own string
	// Want is what a URL must be, as CheckURL says it: "a Redis URL".
	Want string
	// Ports are the port a URL of each of its schemes means when it gives
	// none ("redis": "6379"): ${broker.address} names it.
	Ports map[string]string
	// Local is a server development machines and CI keep running, which
	// the tests use before starting one ("" none: they start one).
	Local string

	// Probe tells a server of this kind from a wrong one within seconds.
	Probe Probe
	// Start starts the runner's own throwaway server: its URL and process.
	// It registers the server's removal with h.Defer and says what it
	// started with h.Logf.
	Start func(ctx context.Context, h Host) (url string, own Process, err error)
	// Open connects to the server at url; own is the process Start
	// returned, nil for a server given by URL. Everything it opens it
	// closes through h.Defer, also when it fails.
	Open func(ctx context.Context, h Host, url string, own Process) (Conn, error)
	// Dir is the KIND of its own server's dir, drill-KIND-* (servers):
	// `runner clean` removes a killed run's.
	Dir string
	// DirOwner, when set, is the user a runner run as root hands its own
	// server's dir to, to run the server as (RabbitMQ: the rabbitmq
	// user): clean then trusts such a dir that user owns. nil: the dir
	// stays the runner's.
	DirOwner func() (*syscall.Credential, error)

	// Capabilities is what the broker can do for a scenario that asks sc
	// of it (its options may add one: JetStream's msg_id, Kafka's share),
	// known before any of its objects exist: the runner skips a scenario
	// that needs more before it acquires anything. The Broker Conn.New
	// makes for sc answers the same (its Capabilities).
	Capabilities func(sc Scenario) Capabilities
	// Limits say why the broker lacks each capability it lacks, each
	// citing the broker's own documentation (a URL).
	Limits map[Capability]string
	// Mechanisms say in words how the broker does each Mechanism: the
	// guarantees document's "How each broker does it".
	Mechanisms map[Mechanism]string
	// Verbs are the broker's own names of what the steps do, for their
	// traces (verbose output, sequence diagrams).
	Verbs Verbs
	// LabelNote is a section the guarantees document ends with when the
	// run's server carried a label (Host.SetLabel: the runner's kfake).
	LabelNote string

	// Placeholders are the ${…} a team's services are told on it besides
	// those every broker fills (system.PlaceholderList says what each
	// is): the names of its objects, "stream" and "group" on Redis. A
	// scenario's broker says their values (Named).
	Placeholders []string
	// EntryFields: its entries carry the event id and the payload in
	// fields a team names, the system file's stream: mapping (Redis), which
	// a file whose services may run on it must give. The scenario's
	// broker then takes the fields (Fielded).
	EntryFields bool
	// Pipelined is the operation of its own that a client pipelines (on
	// Redis XADD): a fault that errors one is not seen by the requests the
	// client sent after it, whose resending is its retry and not a double
	// publish, so explore does not judge double_published after one. "":
	// none.
	Pipelined string

	// ConsumerID says why this broker cannot name the objects of a
	// consumer id (a durable consumer, a queue), nil when it can; nil: any
	// id the loader takes. A scenario with such an id is skipped on this
	// broker with the reason, and runs on the others.
	ConsumerID func(id string) error

	// Options is the zero value of the struct a scenario tunes the
	// broker with under the key Name (nil: no such key). Its fields' tags
	// are those of a step's parameters (param, doc, default, enum, min;
	// steps/params.go): they drive decoding, the reference and the JSON
	// Schema. Conn.New gets a pointer to a decoded one in Scenario.Options.
	Options any
	// OptionsDoc says what the options tune: "this scenario's Kafka topic".
	OptionsDoc string

	// Proxy is the broker's protocol proxy, in front of the server for
	// the faults a team's services meet on their broker link and for the
	// history of what they published, were handed and acknowledged. nil:
	// none (a broker fault skips the scenario, the history is not judged).
	Proxy ProxyKind
}

// Probe is how a server of one kind is told from a wrong one: what the
// prober says first and what a right answer starts with.
type Probe struct {
	Protocol string // for messages: "RabbitMQ (AMQP 0-9-1)"
	Hello    []byte // nil: the server speaks first (NATS)
	Need     int    // bytes of the answer OK judges
	OK       func(answer []byte) bool
	// Addrs are the addresses of url, and whether the protocol's first
	// bytes are plain (not TLS from the start). Its error says why url is
	// not one of Kind.Want, never quoting url's secrets.
	Addrs func(url string) (addrs []Addr, plain bool, err error)
	// Guess names this kind's server from its answer to another
	// protocol's hello ("a Redis server"), or "": optional, for the
	// message about a wrong server.
	Guess func(answer []byte) string
}

// Addr is one network address of a server.
type Addr struct{ Network, Addr string }

// Host is what the runner lends a kind's Start and Open.
type Host interface {
	// Defer registers fn to run when the run ends or its opening fails,
	// the newest first.
	Defer(fn func(context.Context) error)
	// DeferStop registers fn, the stop of a server Start started, to run
	// after everything Defer registered, at the same time as the run's
	// other servers' stops.
	DeferStop(fn func(context.Context) error)
	Logf(format string, args ...any)
	// SetURL records the server's URL (given, or the runner's own): a
	// team's services get it.
	SetURL(url string)
	// SetLabel names the server in reports where it is not the broker
	// itself: "kafka (kfake)".
	SetLabel(label string)
}

// Conn is a run's connection to one kind of broker.
type Conn interface {
	// New is a scenario's own stream or queues, named key.
	New(ctx context.Context, key string, sc Scenario) (Broker, error)
	// Server is the runner's own server process, for process faults; nil
	// with the reason when there is none the runner may crash ("" for a
	// server given by URL: the runner says so itself).
	Server() (Process, string)
	// Ready returns once the connection works again after a (re)start.
	Ready(ctx context.Context) error
	// Hints tell how to inspect the stream or queues named key (--keep).
	Hints(key string) []string
	// Lease marks run runID live on the server until release, or until
	// the run dies: Clean leaves a live run's objects alone.
	Lease(ctx context.Context, runID string) (release func(context.Context) error, err error)
	// Clean removes what runs left on the server: only objects whose names
	// have the exact shape the runner gives (NamePrefix), of runs whose
	// lease is not live.
	Clean(ctx context.Context) (Cleaned, error)
}

// Downer is a Conn whose client learns of its server's end on its own
// (a connection it keeps, read in the background): Down returns once it
// has, so that the step after a stop or kill meets a client that knows,
// not one still writing into the dead connection and waiting for a reply.
type Downer interface {
	Down(ctx context.Context) error
}

// Comeback is a scenario's broker whose clients must catch up with a
// server that came back from the scenario's stop or kill (a Kafka group's
// members rejoin when the coordinator forgot them): the broker step calls
// ServerBack once the server answers again, before the next step.
type Comeback interface {
	ServerBack()
}

// LiveKeeper is a scenario's broker on which a delivery stays with the live
// worker that holds it unacknowledged: no other worker's claim takes it
// over, only the worker's own nack or its end gives it back (RabbitMQ: a
// delivery is the channel's until ack, nack or close; a classic Kafka
// group: a live member keeps its partitions). The history checker then
// counts no claim as a way back for such an entry.
type LiveKeeper interface {
	LiveWorkerKeeps() bool
}

// Scenario is what one scenario asks of its broker.
type Scenario struct {
	// Consumers are the consumer ids its steps name, at least one (a
	// broker that declares queues up front declares these).
	Consumers []string
	// Options are its options (a pointer to the Kind's Options type,
	// decoded from its key or the defaults); nil for a pair taken
	// without a scenario (soak, bench).
	Options any
	// DeliveryLimit, when > 0, has the broker itself set aside an entry
	// on its DeliveryLimit-th delivery (broker_dlq).
	DeliveryLimit int
}

// Process is a server process the runner can crash and start.
type Process interface {
	Kill(context.Context) error
	Halt(context.Context) error
	Start(context.Context) error
}

// Cleaned lists what a clean removed and what it left.
type Cleaned struct {
	Dropped []string // databases, stream keys, streams, queues and exchanges removed
	InUse   []string // databases with open connections: a run in progress?
	Live    []string // objects of a run whose lease is live: left alone
	Notes   []string // what clean cannot see on a server, and how to look by hand
}

// Add appends what o found to c.
func (c *Cleaned) Add(o Cleaned) {
	c.Dropped = append(c.Dropped, o.Dropped...)
	c.InUse = append(c.InUse, o.InUse...)
	c.Live = append(c.Live, o.Live...)
	c.Notes = append(c.Notes, o.Notes...)
}

// Verbs name, in the broker's own words, what a step does on it: a step
// trace says "Produce bus-1 → entry 0/0" on Kafka, "XADD …" on Redis.
type Verbs struct {
	Publish string // a relay's publish: XADD
	Read    string // a consume's read: XREADGROUP
	Ack     string // an acknowledgement: XACK
	Claim   string // a claim's takeover: XCLAIM
}

// Verber is a scenario's broker whose operations have other names than
// its kind's Verbs in the mode the scenario chose (a Kafka share group
// reads with ShareFetch and acknowledges with ShareAcknowledge).
type Verber interface {
	Verbs() Verbs
}

// Mechanism is one thing the pipeline needs that brokers do each their
// own way; its value is the guarantees document's words for it.
type Mechanism string

// The mechanisms every Kind describes, in the order documents show them.
const (
	SecondPublish Mechanism = "a second publish of the same event"
	Takeover      Mechanism = "taking over a dead worker's entry"
	RolledBack    Mechanism = "a delivery whose consumer transaction rolled back"
	Inspection    Mechanism = "inspecting what is pending"
	DeadLetters   Mechanism = "dead letters"
	Durability    Mechanism = "durability of an acknowledged publish, as drilled"
)

// ErrPublish wraps a relay's failed publish: "publish to the broker: …".
var ErrPublish = errors.New("publish to the broker")

// AllMechanisms lists every mechanism, in the order documents show them.
var AllMechanisms = []Mechanism{SecondPublish, Takeover, RolledBack, Inspection, DeadLetters, Durability}

// registry holds the registered kinds in registration order.
var registry struct {
	sync.RWMutex
	kinds []*Kind
}

// Register adds kinds, in order, to the brokers every command, document
// and report knows. It is called from init (broker/kinds, or a package of
// a broker's own); a kind whose name, flag or environment variable another
// kind has already is a programming error, and panics there.
func Register(kinds ...*Kind) {
	registry.Lock()
	defer registry.Unlock()
	for _, k := range kinds {
		for _, o := range registry.kinds {
			if k.Name == o.Name || k.Flag == o.Flag || k.Env == o.Env {
				panic(fmt.Sprintf("broker.Register: %q clashes with %q (name, flag or env)", k.Name, o.Name))
			}
		}
		registry.kinds = append(registry.kinds, k)
	}
}

// Kinds are the registered kinds, in registration order (the default
// broker, Redis, first).
func Kinds() []*Kind {
	registry.RLock()
	defer registry.RUnlock()
	return slices.Clone(registry.kinds)
}

// Default is the default broker's name, where a run or a command names
// none: the first registered kind's (broker/kinds lists Redis first), ""
// while none is.
func Default() string {
	if ks := Kinds(); len(ks) > 0 {
		return ks[0].Name
	}
	return ""
}

// Lookup is the registered kind named name.
func Lookup(name string) (*Kind, bool) {
	for _, k := range Kinds() {
		if k.Name == name {
			return k, true
		}
	}
	return nil, false
}

// Names lists the registered brokers' names, the default first.
func Names() []string {
	var out []string
	for _, k := range Kinds() {
		out = append(out, k.Name)
	}
	return out
}

// WhyNot is why broker name lacks c, citing its documentation, or "" when
// nobody documented it.
func WhyNot(name string, c Capability) string {
	if k, ok := Lookup(name); ok {
		return k.Limits[c]
	}
	return ""
}

// ScenarioKeyMaxLen is the longest scenario key the runner makes
// ("drill:" + 8 hex + ":" + a sequence number of up to 19 digits): the
// room a broker object named <key>.<consumer id> leaves (runner tests it).
const ScenarioKeyMaxLen = 34

// amqpShortStrMax is the longest AMQP 0-9-1 short string (a queue name).
const amqpShortStrMax = 255

// MaxQueueConsumerID is the longest consumer id that fits a RabbitMQ
// queue named <scenario key>.<consumer id>.
const MaxQueueConsumerID = amqpShortStrMax - ScenarioKeyMaxLen - len(".")

// Clip shortens a long name for a message.
func Clip(id string) string {
	const keep = 40
	if len(id) <= keep {
		return id
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", id[:cut], len(id))
}

// ConsumerIDSkip is why the scenario cannot run on broker kind b with
// consumer ids ids ("" when it can): the first id its descriptor's
// ConsumerID refuses.
func ConsumerIDSkip(b string, ids []string) string {
	k, ok := Lookup(b)
	if !ok || k.ConsumerID == nil {
		return ""
	}
	for _, id := range ids {
		if err := k.ConsumerID(id); err != nil {
			return fmt.Sprintf("consumer id %q: %v", Clip(id), err)
		}
	}
	return ""
}
