package runner

import (
	"slices"
	"testing"
	"time"

	"github.com/outboxdrill/runner/scenario"
)

// TestPickerHandsOutTheLoneScenariosFirst: the scenarios that run alone
// come first, together, each group in file order; a broker still starting
// does not hold up the jobs of those that are up.
func TestPickerHandsOutTheLoneScenariosFirst(t *testing.T) {
	plain, alone := &scenario.Scenario{Name: "plain"}, &scenario.Scenario{Name: "alone", Exclusive: true}
	jobs := []job{{sc: plain, broker: "redis"}, {sc: alone, broker: "redis"}, {sc: plain, broker: "kafka"}, {sc: alone, broker: "kafka"}, {sc: plain, broker: "nats"}}
	w := &fakeServers{up: map[string]chan struct{}{"kafka": make(chan struct{})}} // kafka still starting
	pk := newPicker(w, jobs)
	var got []int
	for {
		i, ok := pk.take()
		if !ok {
			break
		}
		got = append(got, i)
		pk.done(i)
		if len(got) == 2 {
			close(w.up["kafka"]) // now up: the rest in order
		}
	}
	if want := []int{1, 0, 3, 2, 4}; !slices.Equal(got, want) {
		t.Errorf("handed out %v, want %v (the lone ones first, kafka's once it is up)", got, want)
	}
}

// fakeServers are a world's servers as the picker asks of them: a broker
// is up once its channel is closed (none: up).
type fakeServers struct {
	up       map[string]chan struct{}
	faultSet bool
}

func (f *fakeServers) IsUp(b string) bool {
	select {
	case <-f.up[b]:
		return true
	default:
		return f.up[b] == nil
	}
}
func (f *fakeServers) FaultSet() bool  { return f.faultSet }
func (f *fakeServers) AwaitPairs(bool) {}

// handable is the job take would hand out now without waiting, or -1.
func handable(pk *picker) int {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if at := pk.next(); at >= 0 {
		return pk.todo[at]
	}
	return -1
}

// TestABrokerFaultHoldsOnlyItsBroker: a scenario that kills its broker's
// server runs with no other scenario on that broker, while the other
// brokers' scenarios run beside it; that broker's other scenarios wait for
// it rather than keep it waiting; a PostgreSQL fault still runs alone.
func TestABrokerFaultHoldsOnlyItsBroker(t *testing.T) {
	plain := &scenario.Scenario{Name: "plain"}
	brokerKill := &scenario.Scenario{Name: "broker kill", BrokerExclusive: true}
	dbKill := &scenario.Scenario{Name: "db kill", Exclusive: true, DBFaults: true}
	jobs := []job{{sc: plain, broker: "kafka"}, {sc: brokerKill, broker: "kafka"}, {sc: plain, broker: "redis"}, {sc: brokerKill, broker: "redis"}, {sc: plain, broker: "redis"}}
	pk := newPicker(&fakeServers{}, jobs)
	take := func(want int) {
		t.Helper()
		if got := handable(pk); got != want {
			t.Fatalf("hands out job %d, want %d", got, want)
		}
		if i, _ := pk.take(); i != want {
			t.Fatalf("took job %d, want %d", i, want)
		}
	}
	take(1) // kafka's broker kill first
	take(3) // redis's beside it: another server
	if got := handable(pk); got != -1 {
		t.Fatalf("hands out job %d while both brokers' servers are being killed", got)
	}
	pk.done(3)
	take(2) // redis's plain ones now, together
	take(4)
	if got := handable(pk); got != -1 {
		t.Fatalf("hands out kafka's job %d beside kafka's broker kill", got)
	}
	pk.done(1)
	take(0)

	// A PostgreSQL fault waits for every running job, and holds back the rest.
	jobs = []job{{sc: plain, broker: "redis"}, {sc: dbKill, broker: "kafka"}, {sc: brokerKill, broker: "redis"}}
	pk = newPicker(&fakeServers{}, jobs)
	take(1)
	if got := handable(pk); got != -1 {
		t.Fatalf("hands out job %d beside a PostgreSQL kill", got)
	}
	took := make(chan int)
	go func() { i, _ := pk.take(); took <- i }()
	select {
	case i := <-took:
		t.Fatalf("took job %d beside a PostgreSQL kill", i)
	case <-time.After(20 * time.Millisecond):
	}
	pk.done(1)
	if i := <-took; i != 2 {
		t.Errorf("after the PostgreSQL kill: took job %d, want redis's broker kill (2)", i)
	}

	// On the run's own servers the PostgreSQL faults have a set of their
	// own: they run one at a time, beside the others.
	jobs = []job{{sc: plain, broker: "redis"}, {sc: dbKill, broker: "kafka"}, {sc: dbKill, broker: "redis"}, {sc: plain, broker: "kafka"}}
	pk = newPicker(&fakeServers{faultSet: true}, jobs)
	take(1)
	take(0) // beside the first PostgreSQL kill
	take(3)
	if got := handable(pk); got != -1 {
		t.Fatalf("hands out job %d, a second PostgreSQL kill beside the first", got)
	}
	pk.done(1)
	take(2)

	// A scenario that stops a server every job shares, and not one of the
	// PostgreSQL faults' own, still runs alone.
	haltAll := &scenario.Scenario{Name: "halt all", Exclusive: true}
	jobs = []job{{sc: plain, broker: "redis"}, {sc: haltAll, broker: "kafka"}}
	pk = newPicker(&fakeServers{faultSet: true}, jobs)
	take(1)
	if got := handable(pk); got != -1 {
		t.Fatalf("hands out job %d beside a scenario that runs alone", got)
	}
}
