package sysrun

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/system"
)

func loadSystem(t *testing.T) *system.System {
	t.Helper()
	sys, errs, err := system.Load(context.Background(), "../examples/node/system.yaml", scenariotest.Kinds())
	if err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
	return sys
}

// The services' URLs are the proxies', never the servers' own, and a
// password in a server URL is kept out of the output.
func TestServicesGetProxyAddresses(t *testing.T) {
	r := New(Config{System: loadSystem(t), BrokerName: "redis", BrokerURL: "redis://:s3cret@127.0.0.1:6379/0",
		ProducerURL: "postgres://u:pw@127.0.0.1:5432/p", ConsumerURL: "postgres://u:pw@127.0.0.1:5432/c", Vars: map[string]string{"stream": "s", "consumer": "c", "db": "${producer_db.url}"}})
	defer r.Close(context.Background())
	s := &service{name: "relay"}
	vars, secrets, err := r.proxies(s)
	defer s.close()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"producer_db.url", "consumer_db.url", "broker.url"} {
		if strings.Contains(vars[k], ":5432") || strings.Contains(vars[k], ":6379") {
			t.Errorf("%s = %s: the server's own address", k, vars[k])
		}
	}
	if !strings.Contains(vars["producer_db.url"], "sslmode=disable") || !strings.Contains(vars["producer_db.url"], "/p?") {
		t.Errorf("producer_db.url %s: want the scenario's database, plain TCP", vars["producer_db.url"])
	}
	// A scenario variable naming a placeholder is this service's value.
	if vars["db"] != vars["producer_db.url"] {
		t.Errorf("${db} (the scenario's \"${producer_db.url}\") = %q, want %q", vars["db"], vars["producer_db.url"])
	}
	// "pw" is too short to hide wherever it appears: redact.Set hides it
	// by its place (user info, password=).
	if strings.Join(secrets, ",") != "s3cret" {
		t.Errorf("secrets %v", secrets)
	}
}

// A start's env is added to the system file's and fills its ${…}: a system
// file can leave a value to each start.
func TestStepEnvFillsTheSystemFile(t *testing.T) {
	r := New(Config{System: loadSystem(t), Vars: map[string]string{"stream": "s1"}})
	spec := &system.Service{Env: map[string]string{"GROUP": "${group}", "STREAM": "${stream}"}}
	env, err := r.environment(spec, map[string]string{"group": "g-${stream}", "EXTRA": "x"}, map[string]string{"stream": "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(env, " "); got != "EXTRA=x GROUP=g-s1 STREAM=s1 group=g-s1" {
		t.Errorf("env %q", got)
	}
	if _, err := r.environment(spec, nil, map[string]string{"stream": "s1"}); err == nil || !strings.Contains(err.Error(), `unknown ${group}`) {
		t.Errorf("an unfilled ${group}: %v", err)
	}
}

// Every secret of every URL handed to a service hides in its output in
// every encoding: the percent-encoded user info password and ?password=
// showed (the red team's P%40ss%2Fw0rd%3A1).
func TestEveryHandedOutSecretIsHidden(t *testing.T) {
	r := New(Config{System: loadSystem(t), BrokerName: "redis", BrokerURL: "redis://:r3d%2Fis@127.0.0.1:6379/0",
		ProducerURL: "postgres://u:P%40ss%2Fw0rd%3A1@127.0.0.1:5432/p", ConsumerURL: "postgres://u@127.0.0.1:5432/c?password=qu3ry%26x",
		Vars: map[string]string{"stream": "s", "consumer": "c"}})
	defer r.Close(context.Background())
	s := &service{name: "relay"}
	vars, secrets, err := r.proxies(s)
	defer s.close()
	if err != nil {
		t.Fatal(err)
	}
	set := redact.NewSet(secrets...)
	said := strings.Join([]string{vars["producer_db.url"], vars["consumer_db.url"], vars["broker.url"],
		"P@ss/w0rd:1", url.QueryEscape("P@ss/w0rd:1"), url.PathEscape("P@ss/w0rd:1"), "qu3ry&x", "qu3ry%26x", "r3d/is", "r3d%2fis"}, "\n")
	got := set.Text(said)
	for _, leak := range []string{"ss/w0rd", "ss%2Fw0rd", "qu3ry", "r3d"} {
		if strings.Contains(got, leak) {
			t.Errorf("%s shows in:\n%s", leak, got)
		}
	}
}

// At the scenario's end (Close) nothing a service started is left: not the
// grandchild a running service double-forked and setsid's, and not the
// daemon a wrapper left when it exited by itself; starting the wrapper
// again takes the daemon its last run left first.
func TestCloseLeavesNoDescendant(t *testing.T) {
	mark := testutil.Mark(1)
	t.Cleanup(func() {
		for _, pid := range testutil.Marked(mark) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	daemonize := func(n int) string {
		return fmt.Sprintf("( setsid sh -c 'exec sleep %s%d' </dev/null >/dev/null 2>&1 & )", mark, n)
	}
	sys := &system.System{File: "system.yaml", Dir: t.TempDir(), Services: map[string]*system.Service{
		"daemon":  {Name: "daemon", Run: []string{"sh", "-c", daemonize(1) + "; echo ready; sleep 60"}, Ready: "ready"},
		"wrapper": {Name: "wrapper", Run: []string{"sh", "-c", daemonize(2)}},
	}}
	r := New(Config{System: sys, BrokerName: "nats", BrokerURL: "nats://127.0.0.1:4222",
		ProducerURL: "postgres://u@127.0.0.1:5432/p", ConsumerURL: "postgres://u@127.0.0.1:5432/c", Vars: map[string]string{"stream": "s", "consumer": "c"}})
	ctx := context.Background()
	waitFor := func(what string, n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); len(testutil.Marked(mark+what)) != n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d processes sleep %s%s, want %d", len(testutil.Marked(mark+what)), mark, what, n)
			}
		}
	}
	for _, svc := range []string{"daemon", "wrapper"} {
		if _, err := r.Start(ctx, svc, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("1", 1)
	waitFor("2", 1)
	first := testutil.Marked(mark + "2")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if exited, _ := r.svcs["wrapper"].proc.Exited(); exited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the wrapper did not exit")
		}
	}
	if _, err := r.Start(ctx, "wrapper", nil, nil); err != nil {
		t.Fatal(err)
	}
	waitFor("2", 1)
	if again := testutil.Marked(mark + "2"); slices.Equal(again, first) {
		t.Errorf("the wrapper's first daemon %v outlived its start again", first)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := testutil.Marked(mark); len(left) > 0 {
		t.Errorf("after the scenario: %v still run", left)
	}
}

// A service killed and started again that never prints its ready line:
// the failure's outputs keep both processes, each labelled by how it
// ended, the killed one as killed, never as the latest output. ready's
// timeout bounds the wait.
func TestKilledAndNeverReadyEachLabelled(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "started-once")
	// The first run is ready at once; the second keeps waiting (a restarted
	// Kafka consumer waiting out the dead member's session).
	script := fmt.Sprintf("if [ -e %[1]s ]; then echo rejoining; exec sleep 60; fi; touch %[1]s; echo ready; exec sleep 60", marker)
	sys := &system.System{File: "system.yaml", Dir: dir, Services: map[string]*system.Service{
		"consumer": {Name: "consumer", Run: []string{"sh", "-c", script}, Ready: "ready", ReadyTimeout: 300 * time.Millisecond},
	}}
	r := New(Config{System: sys, BrokerName: "kafka", BrokerURL: "kafka://127.0.0.1:9092",
		ProducerURL: "postgres://u@127.0.0.1:5432/p", ConsumerURL: "postgres://u@127.0.0.1:5432/c", Vars: map[string]string{"consumer": "c"}})
	defer r.Close(context.Background())
	ctx := context.Background()
	if _, err := r.Start(ctx, "consumer", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.Kill(ctx, "consumer"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := r.Start(ctx, "consumer", nil, nil)
	if err == nil || !strings.Contains(err.Error(), `no line containing "ready" on its output within 300ms`) || time.Since(start) > 5*time.Second {
		t.Fatalf("the restart: %v after %s; want it never ready within its 300ms", err, time.Since(start))
	}
	outs := r.Outputs()
	if len(outs) != 2 {
		t.Fatalf("outputs %+v, want both processes", outs)
	}
	if outs[0].Ended != "killed" || !strings.Contains(outs[0].Text, "ready") {
		t.Errorf("the killed process: ended %q, output %q", outs[0].Ended, outs[0].Text)
	}
	if !strings.HasPrefix(outs[1].Ended, "never ready: service consumer: no line containing") || strings.TrimSpace(outs[1].Text) != "rejoining" {
		t.Errorf("the restart: ended %q, output %q", outs[1].Ended, outs[1].Text)
	}
}

// ${broker.address} is HOST:PORT[,HOST:PORT] of every server a broker URL
// names, without scheme or credentials, a default port filled in; on Redis
// it is the service's own proxy.
func TestBrokerAddress(t *testing.T) {
	for in, want := range map[string]string{
		"kafka://127.0.0.1:9092":                  "127.0.0.1:9092",
		"kafka://a:1,b:2":                         "a:1,b:2",
		"127.0.0.1:59092,127.0.0.1:59093":         "127.0.0.1:59092,127.0.0.1:59093",
		"nats://u:pw@n1:4222,nats://n2:4223":      "n1:4222,n2:4223",
		"amqp://guest:s3cret@127.0.0.1/vhost":     "127.0.0.1:5672",
		"redis://:s3cret@[::1]:6380/0":            "[::1]:6380",
		"amqps://guest:guest@rabbit.example:5671": "rabbit.example:5671",
	} {
		if got, err := address(in); err != nil || got != want {
			t.Errorf("address(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := address("nats://u:s3cret@[bad"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a broken URL: %v (want an error without its password)", err)
	}
	r := New(Config{System: loadSystem(t), BrokerName: "redis", BrokerURL: "redis://:s3cret@127.0.0.1:6379/0",
		ProducerURL: "postgres://u@127.0.0.1:5432/p", ConsumerURL: "postgres://u@127.0.0.1:5432/c", Vars: map[string]string{"stream": "s", "consumer": "c"}})
	defer r.Close(context.Background())
	s := &service{name: "relay"}
	vars, _, err := r.proxies(s)
	defer s.close()
	if err != nil || vars["broker.address"] != s.broker.Address() {
		t.Errorf("on redis broker.address = %q, %v; want the proxy %s", vars["broker.address"], err, s.broker.Address())
	}
}

// fakeProxy is a broker proxy whose wire is given.
type fakeProxy struct{ w broker.Wire }

func (f fakeProxy) URL() string                               { return "" }
func (f fakeProxy) Address() string                           { return "" }
func (f fakeProxy) Arm(fault.Compiled) (broker.Strike, error) { return nil, nil }
func (f fakeProxy) Wire(broker.WireMap) broker.Wire           { return f.w }
func (f fakeProxy) Close()                                    {}

// The history from the wire is the scenario's destination's: a service's
// publish to an output topic, or a delivery from another stream, is not
// an entry the checker counts; a message with no event id there is said
// to be one, elsewhere not.
func TestWireKeepsTheScenariosDestination(t *testing.T) {
	r := New(Config{System: loadSystem(t), Vars: map[string]string{"destination": "orders", "group": "g", "consumer": "c"}})
	t0 := time.Now()
	w := broker.Wire{EventIDFrom: "the record key",
		Publishes:  []broker.WireMsg{{At: t0, Op: "Produce", EntryID: "0/0", EventID: "e1", Dest: "orders"}, {At: t0.Add(time.Millisecond), Op: "Produce", EntryID: "0/0", Dest: "orders-out"}},
		Deliveries: []broker.WireMsg{{At: t0.Add(2 * time.Millisecond), Op: "Fetch", EntryID: "0/0", EventID: "e1", Dest: "orders", Group: "g"}, {At: t0.Add(3 * time.Millisecond), Op: "Fetch", Dest: "other", Group: "g"}}}
	r.logs = append(r.logs, brokerLog{service: "svc", start: 1, proxy: fakeProxy{w}, svc: &service{name: "svc"}})
	ops := r.Wire().Ops()
	if len(ops) != 2 || ops[0].EventID != "e1" || ops[1].Consumer != "c" {
		t.Errorf("ops %+v, want e1's publish and its delivery to c only", ops)
	}
	if errs := r.Wire().FieldProblems(); len(errs) != 0 {
		t.Errorf("a message elsewhere without an event id was reported: %v", errs)
	}
	w.Publishes[0].EventID = ""
	r.logs[0].proxy = fakeProxy{w}
	if errs := r.Wire().FieldProblems(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "service svc: Produce carried no event id where the runner looks for it: the record key") {
		t.Errorf("the scenario's own message without an event id: %v", errs)
	}
}

// TestAFullRecordJudgesNothingOfTheWire: with events left out of a broker
// proxy's record, no invariant that rests on the wire is judged (a dropped
// delivery would make an applied event look lost), and the reason names
// the service; what the wire already could not judge stays.
func TestAFullRecordJudgesNothingOfTheWire(t *testing.T) {
	got := recordFull(map[string]string{"other": "why"}, []string{"consumer (start 2): 17 events left out"})
	for _, inv := range []string{history.AckedWithoutEffect, history.DoubleApplied, history.DoublePublished, history.Lost, history.Phantom, history.Stranded} {
		if !strings.Contains(got[inv], "consumer (start 2): 17 events left out") {
			t.Errorf("%s: %q", inv, got[inv])
		}
	}
	if got["other"] != "why" || got[history.ProjectionMismatch] != "" {
		t.Errorf("other invariants: %v", got)
	}
}

// patientProxy is a fakeProxy that announced timers on the wire.
type patientProxy struct {
	fakeProxy
	waits []broker.Wait
}

func (p patientProxy) Waits() []broker.Wait { return p.waits }

// The timers settling waits for: the longest of each kind over every
// proxy of the run, a rebalance timeout left out (live members rejoin at
// their next heartbeat; a dead member's partitions wait for its session).
func TestWaitsAreTheLongestAnnouncedTimers(t *testing.T) {
	r := New(Config{System: loadSystem(t)})
	session, rebalance := "consumer group g's session timeout (JoinGroup)", "consumer group g's rebalance timeout (JoinGroup)"
	r.logs = append(r.logs,
		brokerLog{service: "a", start: 1, proxy: patientProxy{waits: []broker.Wait{{What: session, For: 6 * time.Second}, {What: rebalance, For: time.Minute}}}},
		brokerLog{service: "a", start: 2, proxy: patientProxy{waits: []broker.Wait{{What: session, For: 10 * time.Second}}}},
		brokerLog{service: "b", start: 3, proxy: fakeProxy{}})
	got := r.Waits()
	if len(got) != 1 || got[0].What != session || got[0].For != 10*time.Second {
		t.Errorf("Waits() = %v, want only the longest session timeout", got)
	}
}

// A consumer that published an event it was handed to another destination
// moved it aside (its dead-letter stream); a publish to the scenario's own
// destination, or of an event it was never handed, is not.
func TestMovedAside(t *testing.T) {
	sys := loadSystem(t)
	sys.DeadLetter = "${destination}:dead"
	r := New(Config{System: sys, Vars: map[string]string{"destination": "orders", "group": "g", "consumer": "c"}})
	t0 := time.Now()
	w := broker.Wire{
		Deliveries: []broker.WireMsg{{At: t0, Op: "XREADGROUP", EntryID: "1-0", EventID: "e1", Dest: "orders", Group: "g"},
			{At: t0, Op: "XREADGROUP", EntryID: "2-0", EventID: "e3", Dest: "orders", Group: "g"}},
		Publishes: []broker.WireMsg{{At: t0.Add(time.Millisecond), Op: "XADD", EventID: "e1", Dest: "orders:dead", Payload: "p"},
			{At: t0.Add(time.Millisecond), Op: "XADD", EventID: "e2", Dest: "orders:dead"},
			{At: t0.Add(time.Millisecond), Op: "XADD", EventID: "e1", Dest: "orders"},
			{At: t0.Add(time.Millisecond), Op: "XADD", EventID: "e3", Dest: "orders.retry"}}}
	r.logs = append(r.logs, brokerLog{service: "consumer", start: 2, proxy: fakeProxy{w}, svc: &service{name: "consumer"}})
	got := r.Wire().MovedAside()
	if len(got) != 2 || got["e1"].Payload != "p" || got["e1"].Op != "service consumer (start 2) published it to orders:dead"+DeadLetterOp {
		t.Errorf("MovedAside() = %v, want e1 dead-lettered to orders:dead", got)
	}
	// A retry topic is not the declared dead-letter destination: only a hint.
	if op := got["e3"].Op; op != "service consumer (start 2) published it to orders.retry" {
		t.Errorf("e3: %q", op)
	}
}
