package broker

// NamePrefix starts every database name, stream key, topic and queue the
// runner creates; the run id (8 hex digits) follows it after a separator,
// then a counter, so the runner (and a kind's Clean) only ever drops its
// own objects.
const NamePrefix = "drill"

// RunIDForm and CounterForm are the run id and the counter of an object
// name as the runner writes them (fmt's %d: no leading zero), for the
// patterns a clean matches names with: drill_deadbeef_01_p is not one.
const (
	RunIDForm   = `[0-9a-f]{8}`
	CounterForm = `(?:0|[1-9][0-9]*)`
)

// LeaseName is run id's lease on a server, with sep the server's word
// separator: a PostgreSQL application_name (drill_lease_ID), a Redis key
// (drill:lease:ID), a NATS subject or a RabbitMQ queue (drill.lease.ID).
// None has the shape of an object name, so a clean never takes a lease.
func LeaseName(sep, runID string) string { return NamePrefix + sep + "lease" + sep + runID }

// RunOf is the run id in a name of the runner's shape (the prefix, a
// separator, 8 hex digits, ...); the caller has matched the shape.
func RunOf(name string) string { return name[len(NamePrefix)+1 : len(NamePrefix)+9] }

// LiveRuns asks live about each run once, however many of its objects a
// clean meets: the returned func tells whether name's run (RunOf) is live.
func LiveRuns(live func(run string) bool) func(name string) bool {
	known := map[string]bool{}
	return func(name string) bool {
		run := RunOf(name)
		l, seen := known[run]
		if !seen {
			l = live(run)
			known[run] = l
		}
		return l
	}
}
