package runner

import (
	"slices"
	"sync"

	"github.com/outboxdrill/runner/world"
)

// exclusion says which jobs may run at the same time. A job whose scenario
// faults a PostgreSQL (DBFaults) runs on the run's own servers on a set of
// servers such jobs have to themselves (split, World.faultSet, setOf), one
// at a time beside the others. A job that kills, stops or starts a server
// every job shares (Exclusive, but not on that set: --pg) runs alone. A
// job that does so to its broker's server (BrokerExclusive) runs with no
// other job on that broker, while the jobs of the run's other brokers go
// on. Any other job runs beside any job but those.
type exclusion struct {
	split    bool // DBFaults jobs have PostgreSQL servers of their own
	running  int
	alone    bool           // a job runs that runs alone
	faults   bool           // a job runs on the DBFaults jobs' servers
	onBroker map[string]int // jobs running per broker; -1: a BrokerExclusive one
}

// ownServers reports whether j runs on the servers of the jobs that fault
// a PostgreSQL (the World's set 1: World.setOf says the same).
func (e *exclusion) ownServers(j job) bool { return e.split && j.sc.DBFaults }

// runsAlone reports whether j runs with no other job.
func (e *exclusion) runsAlone(j job) bool { return j.sc.Exclusive && !e.ownServers(j) }

// admits reports whether j may start now.
func (e *exclusion) admits(j job) bool {
	n := e.onBroker[j.broker]
	switch {
	case e.runsAlone(j):
		return e.running == 0
	case e.alone || n < 0 || e.ownServers(j) && e.faults:
		return false
	case j.sc.BrokerExclusive:
		return n == 0
	}
	return true
}

func (e *exclusion) enter(j job) {
	if e.onBroker == nil {
		e.onBroker = map[string]int{}
	}
	e.running++
	if e.runsAlone(j) {
		e.alone = true
		return
	}
	e.faults = e.faults || e.ownServers(j)
	if j.sc.BrokerExclusive {
		e.onBroker[j.broker] = -1
	} else {
		e.onBroker[j.broker]++
	}
}

func (e *exclusion) leave(j job) {
	e.running--
	if e.runsAlone(j) {
		e.alone = false
		return
	}
	e.faults = e.faults && !e.ownServers(j)
	if j.sc.BrokerExclusive {
		e.onBroker[j.broker] = 0
	} else {
		e.onBroker[j.broker]--
	}
}

// serverState is what the picker asks of the world (world.World): whose
// servers are up, whether the scenarios that fault a PostgreSQL have
// servers of their own, and to wait for the database pairs being made.
type serverState interface {
	IsUp(b string) bool
	FaultSet() bool
	AwaitPairs(faultsOnly bool)
}

var _ serverState = (*world.World)(nil)

// picker hands the workers the jobs in its order (newPicker), each once
// exclusion admits it, and first those whose broker's server is up: the
// others wait for theirs (a RabbitMQ node booting) without holding up the
// rest.
type picker struct {
	mu    sync.Mutex
	freed *sync.Cond // a job ended
	w     serverState
	jobs  []job
	todo  []int // job indexes not taken yet, in order
	ex    exclusion
}

// newPicker orders the jobs: those that fault a PostgreSQL (Exclusive)
// first, then those alone on their broker, then the rest, each group in
// file order. Where an Exclusive job runs alone, it waits for every running
// one to end; handed out together, they wait once, at the start where
// nothing runs, instead of draining the workers once each; on servers of
// their own, their chain, one at a time, starts first. A broker's
// BrokerExclusive jobs go before its other jobs, which wait for them
// (take), while the other brokers' jobs fill the workers.
func newPicker(w serverState, jobs []job) *picker {
	pk := &picker{w: w, jobs: jobs, ex: exclusion{split: w.FaultSet()}}
	pk.freed = sync.NewCond(&pk.mu)
	rank := func(j job) int {
		switch {
		case j.sc.Exclusive || j.sc.DBFaults:
			return 0
		case j.sc.BrokerExclusive:
			return 1
		}
		return 2
	}
	for r := range 3 {
		for i, j := range jobs {
			if rank(j) == r {
				pk.todo = append(pk.todo, i)
			}
		}
	}
	return pk
}

// take waits for a job it may hand out and marks it running (done ends
// it); false when none is left.
func (pk *picker) take() (int, bool) {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	for len(pk.todo) > 0 {
		at := pk.next()
		if at < 0 {
			pk.freed.Wait()
			continue
		}
		i := pk.todo[at]
		pk.todo = slices.Delete(pk.todo, at, at+1)
		pk.ex.enter(pk.jobs[i])
		return i, true
	}
	return 0, false
}

// next is the index in todo of the job to hand out now, or -1. While an
// Exclusive job that runs alone and whose broker is up waits, only
// Exclusive jobs go; while one
// of a broker's BrokerExclusive jobs waits, none of that broker's other
// jobs goes (so they do not keep it waiting to the end). Of the admitted
// jobs, the first whose broker is up, else the first: a broker still
// starting holds up no other's jobs.
func (pk *picker) next() int {
	waiting := map[string]bool{} // brokers with a BrokerExclusive job not taken yet
	exclusive := false
	first := -1
	for at, i := range pk.todo {
		j := pk.jobs[i]
		up := pk.w.IsUp(j.broker)
		held := (exclusive && !pk.ex.runsAlone(j)) || (!j.sc.BrokerExclusive && waiting[j.broker])
		exclusive = exclusive || (pk.ex.runsAlone(j) && up)
		if j.sc.BrokerExclusive {
			waiting[j.broker] = true
		}
		switch {
		case held || !pk.ex.admits(j):
		case up:
			return at
		case first < 0:
			first = at
		}
	}
	return first
}

// settle waits, before job i (which take handed out) runs, for the
// database pairs still being created on servers it will kill or stop: a
// creation must not meet the kill. Every creation starts in a running job
// on those servers, and none runs beside i, so none starts meanwhile.
func (pk *picker) settle(i int) {
	j := pk.jobs[i]
	switch {
	case pk.ex.runsAlone(j):
		pk.w.AwaitPairs(false)
	case pk.ex.ownServers(j):
		pk.w.AwaitPairs(true)
	}
}

// done ends job i, which take handed out.
func (pk *picker) done(i int) {
	pk.mu.Lock()
	pk.ex.leave(pk.jobs[i])
	pk.mu.Unlock()
	pk.freed.Broadcast()
}
