package sysrun

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/servers"
)

// Live is a service process still running, with what it uses: whether it
// ever connected to the producer's database (it may still publish the
// outbox) and the consumer groups it read as on the broker (it may still
// take their pending entries).
type Live struct {
	Name     string
	Producer bool
	// Consumer: it uses the consumer's database and the broker, so it is
	// a consumer, whether or not it has read yet (Groups).
	Consumer bool
	Groups   []string
	// Claims is, per group, the longest min-idle the service claimed
	// pending entries with (XCLAIM, XAUTOCLAIM); a group it never claimed
	// in is missing.
	Claims map[string]time.Duration
	// Seen: the runner sees the groups it reads as (a protocol proxy that
	// tells them: Redis's); false elsewhere, so its groups are unknown.
	Seen bool
	// Proxied: its broker traffic crosses a protocol proxy, so what it
	// published is in the history.
	Proxied bool
	// Restarting: its process ended and its supervisor is starting the
	// next (what it uses is the ended process's).
	Restarting bool
	// Since is when its running process began to run: a consumer started
	// again while settling has not had the whole limit yet.
	Since time.Time
	// GaveUp: its process ended and its supervisor gave up restarting it
	// after this many restarts in a row (a crash loop): it runs no more,
	// but owes the run what a running one would — no progress is not
	// excused by crashing.
	GaveUp int
	// InTx names the databases ("producer_db", "consumer_db") on which it
	// holds a transaction open now: it is mid-work, whatever the tables
	// show yet.
	InTx []string
	// Awaiting is, per database (producer_db, consumer_db), the longest
	// one of its connections has waited for the server's answer without a
	// break (a statement in flight; 0 for none; a replication stream is
	// not counted).
	Awaiting [2]time.Duration
	// IdlePoll is when it last sent the broker a read of new work that
	// handed out nothing (broker.Idler); zero when none, or when its
	// broker's proxy cannot tell.
	IdlePoll time.Time
	// DB is, per database (producer_db, consumer_db; zero where it does
	// not use it), its connections open now and the errors the server
	// answered it with: a stuck verdict's witness.
	DB [2]DBState
}

// DBState is a service's link to one database, as its proxy saw it.
type DBState struct {
	Used   bool
	Open   int
	Errors []string // "23514 new row … ×6", the most frequent first
	// Ports are the local ports of its connections to the server through
	// the proxy: their backends' client_port in pg_stat_activity.
	Ports []int
}

// String is "2 connection(s) open; the server answered: …".
func (d DBState) String() string {
	s := fmt.Sprintf("%d connection(s) open", d.Open)
	if len(d.Errors) > 0 {
		s += "; the server answered " + strings.Join(d.Errors, ", ")
	}
	return s
}

// Live lists the services still running, by name.
func (r *Run) Live() []Live {
	r.mu.Lock()
	svcs := make([]*service, 0, len(r.svcs))
	for _, s := range r.svcs {
		svcs = append(svcs, s)
	}
	// A supervised service being restarted runs on: its old process
	// stands for it until the new one is up.
	replacing := r.replacing()
	for s := range replacing {
		if r.svcs[s.name] == nil {
			svcs = append(svcs, s)
		}
	}
	// A supervised process that ended is being replaced from that moment,
	// before its supervisor's next tick marks it so: in that gap a crash
	// loop must not look like a service that is simply gone.
	supervised := map[string]bool{}
	for name := range r.supervised {
		supervised[name] = true
	}
	gaveUp := maps.Clone(r.gaveUp)
	r.mu.Unlock()
	hide := r.secretsSet()
	var out []Live
	for _, s := range svcs {
		s.mu.Lock()
		proc, since := s.proc, s.since
		s.mu.Unlock()
		if proc == nil {
			continue
		}
		exited, _ := proc.Exited()
		restarting := replacing[s] || exited && supervised[s.name]
		given, ok := gaveUp[s.name]
		if exited && !restarting && !ok {
			continue
		}
		gr, seen := s.broker.(groupReader)
		l := Live{Name: s.name, Seen: seen, Proxied: s.broker != nil, Restarting: restarting, Since: since, GaveUp: given,
			Producer: s.given[0] || s.pg[0] != nil && s.pg[0].Connections() > 0,
			Consumer: (s.given[1] || s.pg[1] != nil && s.pg[1].Connections() > 0) && (s.given[2] || seen && gr.Connections() > 0)}
		if seen {
			l.Groups, l.Claims = gr.ReadGroups()
		}
		if id, ok := s.broker.(broker.Idler); ok {
			l.IdlePoll = id.IdlePoll()
		}
		for i, p := range s.pg {
			if p != nil && p.OpenTransactions() > 0 {
				l.InTx = append(l.InTx, []string{"producer_db", "consumer_db"}[i])
			}
			if p != nil {
				l.Awaiting[i] = p.Awaiting()
			}
			if p != nil && p.Connections() > 0 {
				l.DB[i] = DBState{Used: true, Open: p.OpenConnections(), Errors: hide.lines(p.Errors()), Ports: p.ServerPorts()}
			}
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Live) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Waits are the timers the services announced to the broker on the wire
// (broker.Patient), the longest per kind, from every broker proxy of the
// run. A rebalance timeout is left out: it bounds how long the broker
// waits for live members to rejoin, which they do at their next
// heartbeat; what keeps a dead member's partitions is its session timeout.
func (r *Run) Waits() []broker.Wait {
	r.mu.Lock()
	logs := slices.Clone(r.logs)
	r.mu.Unlock()
	longest := map[string]time.Duration{}
	for _, l := range logs {
		p, ok := l.proxy.(broker.Patient)
		if !ok {
			continue
		}
		for _, w := range p.Waits() {
			if !strings.Contains(w.What, "rebalance") {
				longest[w.What] = max(longest[w.What], w.For)
			}
		}
	}
	out := make([]broker.Wait, 0, len(longest))
	for _, what := range slices.Sorted(maps.Keys(longest)) {
		out = append(out, broker.Wait{What: what, For: longest[what]})
	}
	return out
}

// groupReader is a broker proxy that tells the groups a service read as
// and its claims' min-idle (Redis's); where the proxy does not, the
// service's groups stay unseen.
type groupReader interface {
	ReadGroups() ([]string, map[string]time.Duration)
	Connections() int
}

// ClaimIdle is the longest min-idle a live service claims group's entries
// with; ok is false when none claims them.
func ClaimIdle(live []Live, group string) (d time.Duration, ok bool) {
	for _, l := range live {
		if c, claims := l.Claims[group]; claims {
			d, ok = max(d, c), true
		}
	}
	return d, ok
}

// LiveReaders are the live services reading as group, and whether any live
// service's broker traffic is unseen (then a reader may hide there).
func LiveReaders(live []Live, group string) (names []string, unseen bool) {
	for _, l := range live {
		if !l.Seen {
			unseen = true
		}
		if slices.Contains(l.Groups, group) {
			names = append(names, l.Name)
		}
	}
	return names, unseen
}

// secretsSet hides the run's secrets in what its servers said (an error
// message may quote a literal: a password in a statement), as the
// services' output is hidden.
func (r *Run) secretsSet() hider {
	r.hideOnce.Do(func() {
		r.hide = redact.NewSet(redact.URLSecrets(r.cfg.ProducerURL, r.cfg.ConsumerURL, r.cfg.BrokerURL)...)
	})
	return hider{r.hide}
}

type hider struct{ *redact.Set }

func (h hider) lines(in []string) []string {
	for i, l := range in {
		in[i] = h.Text(l)
	}
	return in
}

// CPUWait is how long one process of a service (PID) waited for a CPU
// since it started (servers.CPUWait, its threads' waits summed).
type CPUWait struct {
	PID int
	For time.Duration
}

// CPUWaits are the services' CPU waits, by name: of each one's latest
// process still running, also one its supervisor started that is not
// ready yet (a restart under way when settling begins must be in its
// baseline); ok false where the kernel keeps no such count (then none is
// given more time).
func (r *Run) CPUWaits() (map[string]CPUWait, bool) {
	r.mu.Lock()
	insts := slices.Clone(r.insts)
	r.mu.Unlock()
	latest := map[string]*servers.Service{}
	for _, in := range insts { // in start order: the latest wins
		in.mu.Lock()
		if in.proc != nil {
			if exited, _ := in.proc.Exited(); !exited {
				latest[in.service] = in.proc
			}
		}
		in.mu.Unlock()
	}
	names := slices.Sorted(maps.Keys(latest))
	procs := make([]*servers.Service, len(names))
	for i, name := range names {
		procs[i] = latest[name]
	}
	waits, ok := servers.CPUWait(procs...)
	if !ok {
		return nil, false
	}
	out := make(map[string]CPUWait, len(names))
	for i, name := range names {
		out[name] = CPUWait{PID: procs[i].PID(), For: waits[i]}
	}
	return out, true
}
