package report

import "time"

// Wire is what a team's service processes did on the wire, as their
// proxies saw it: the lanes and arrows of the scenario's timeline (the
// HTML report, the Markdown's sequence diagram). Nil on the reference
// pipeline, whose steps draw themselves (steps.Drawn).
type Wire struct {
	Processes []Process // one lane each, in start order
	Ops       []WireOp  // in time order
}

// Process is one process of a team's service: each start (and each
// supervisor restart) its own.
type Process struct {
	N       int    // the run's Nth process, from 1: WireOp.Process
	Service string // the system file's name of the service
	Start   string // the start step that started it, file:line:col
	Restart int    // 0 for a start step's own process; k for the supervisor's k-th restart
	PID     int    // 0: it never ran
	Fault   string // the fault armed with its start, "" for none
	Ended   string // how it ended: "killed by the fault", "still running when the scenario ended", …
}

// WireOp classes: what the history makes of an operation.
const (
	ClassPublish = "publish"
	ClassDeliver = "deliver"
	ClassAck     = "ack"
	ClassCommit  = "commit"
)

// WireOp is one operation a process made across one of its proxies.
type WireOp struct {
	At      time.Time
	Process int    // Process.N
	Link    string // producer_db, consumer_db or broker
	// Op is what crossed: on a database COMMIT, or a statement by its
	// command (INSERT, UPDATE, …; "statement" where the proxy did not hold
	// its reply); the broker's own operation (XADD, XREADGROUP, XACK) or the
	// neutral one (publish, deliver, ack) on the broker.
	Op     string
	Class  string   // ClassPublish, ClassDeliver, ClassAck, ClassCommit, or "" for another
	Tables []string // what a commit or statement wrote, where the proxy learnt it
	// Unlearnt: a commit whose tables the proxy did not ask the server
	// (no commit trigger was armed on that link, and nobody observed).
	Unlearnt bool
	// Reply is the kind of the broker's answer ("ok", "entries",
	// "empty", "error", "none": none reached the process), "" where it
	// answers nothing.
	Reply string
	// Fault is the trigger that struck here, as the proxy names it
	// ("broker.reply(XADD) nth=1 do=kill"); "" for none.
	Fault string
	// Events are the messages it carried: a publish's, a delivery's, and
	// for an ack the deliveries it acknowledged.
	Events []WireEvent
}

// WireEvent is one message an operation carried.
type WireEvent struct {
	EventID, EntryID string
	Group            string // a delivery's consumer group, as the broker names it
	Dest             string // where it was published (a stream, topic, subject, exchange)
}
