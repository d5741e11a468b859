package brokertest

import (
	"context"
	"crypto/rand"
	"errors"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/redisstream"
	"github.com/outboxdrill/runner/internal/testservers"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// faults break one promise of a real broker each; the case named must then
// fail.
var faults = map[string]string{
	"publish-read-ack":                         "reversed-reads",
	"every-group-gets-every-message":           "second-group-starves",
	"read-waits-at-most-block":                 "empty-read-errs",
	"entry-log-counts-every-publish":           "entries-miss-one",
	"claim-takes-over-an-unacked-entry":        "claim-is-a-first-delivery",
	"nack-gives-the-entry-back":                "nack-acks",
	"crash-gives-back-what-the-worker-held":    "crash-drops-the-entries",
	"dead-letters-round-trip":                  "dead-letters-vanish",
	"unsupported-says-so":                      "pending-count-undeclared",
	"lag-counts-what-a-group-has-not-finished": "lag-forgets-the-unacked",
}

// faulty is Redis Streams with fault.
type faulty struct {
	broker.Broker
	fault string
}

func (f faulty) Capabilities() broker.Capabilities {
	caps := maps.Clone(f.Broker.Capabilities())
	if f.fault == "pending-count-undeclared" {
		delete(caps, broker.PendingCount)
	}
	return caps
}

func (f faulty) Read(ctx context.Context, group, worker string, count int, block time.Duration) ([]broker.Delivery, error) {
	ds, err := f.Broker.Read(ctx, group, worker, count, block)
	switch {
	case f.fault == "reversed-reads":
		slices.Reverse(ds)
	case f.fault == "second-group-starves" && group == "g2":
		ds = nil
	case f.fault == "empty-read-errs" && len(ds) == 0:
		err = errors.New("nothing to read")
	}
	return ds, err
}

func (f faulty) Entries(ctx context.Context) (int64, error) {
	n, err := f.Broker.Entries(ctx)
	if f.fault == "entries-miss-one" {
		n--
	}
	return n, err
}

func (f faulty) Claim(ctx context.Context, group, worker string, minIdle time.Duration, count int) ([]broker.Delivery, error) {
	ds, err := f.Broker.Claim(ctx, group, worker, minIdle, count)
	if f.fault == "claim-is-a-first-delivery" {
		for i := range ds {
			ds[i].Deliveries = 1
		}
	}
	return ds, err
}

func (f faulty) Nack(ctx context.Context, group string, ids ...string) error {
	if f.fault == "nack-acks" {
		return f.Broker.Ack(ctx, group, ids...)
	}
	return f.Broker.Nack(ctx, group, ids...)
}

func (f faulty) Crash(ctx context.Context, group, worker string) error {
	if f.fault == "crash-drops-the-entries" { // as if the broker lost what the worker held
		_, err := f.Broker.Trim(ctx, 0)
		return err
	}
	return f.Broker.Crash(ctx, group, worker)
}

// Lag counts as if delivered meant finished: the unacknowledged entry
// drops out.
func (f faulty) Lag(ctx context.Context) (map[string]int64, error) {
	m, err := f.Broker.(broker.Lagging).Lag(ctx)
	if f.fault == "lag-forgets-the-unacked" {
		for g := range m {
			m[g]--
		}
	}
	return m, err
}

func (f faulty) DeadLetters(ctx context.Context) ([]broker.DeadLetter, error) {
	dls, err := f.Broker.DeadLetters(ctx)
	if f.fault == "dead-letters-vanish" {
		dls = nil
	}
	return dls, err
}

// faultEnv names the fault TestFaultyBroker runs the suite with: "own" is
// each case's own fault (faults), "none" none.
const faultEnv = "BROKERTEST_FAULT"

// TestFaultyBroker is the suite on a broken broker: run only by
// TestEveryCaseCanFail, in a child process.
func TestFaultyBroker(t *testing.T) {
	fault := os.Getenv(faultEnv)
	if fault == "" {
		t.Skip("run by TestEveryCaseCanFail")
	}
	opt, err := redis.ParseURL(testservers.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	if fault != "none" {
		GiveBackWithin = time.Second // Redis gives an entry back at once, when it does
	}
	Run(t, redisstream.Kind, func(t *testing.T, _ ...string) broker.Broker {
		s := redisstream.New(rdb, "outboxdrill:brokertest-"+rand.Text()[:10])
		t.Cleanup(func() { _ = s.Delete(context.Background()) })
		if fault == "own" { // the fault of the case this broker is for
			_, name, _ := strings.Cut(t.Name(), "/")
			return faulty{s, faults[name]}
		}
		return faulty{s, fault}
	})
}

// TestEveryCaseCanFail runs the suite on Redis Streams with, for each case,
// the fault that case exists to catch: each must fail. Without faults every
// case passes (a control, so a failure is the fault's).
func TestEveryCaseCanFail(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis server and the suite in two test processes")
	}
	redisURL := testservers.Redis(t)
	child := func(fault string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFaultyBroker$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), faultEnv+"="+fault, "RUNNER_REDIS_URL="+redisURL)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return string(out)
	}
	control, faulted := child("none"), child("own")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(control, "--- PASS: TestFaultyBroker/"+tc.name+" ") {
				t.Fatalf("without a fault the case does not pass:\n%s", control)
			}
			fault := faults[tc.name]
			if fault == "" {
				t.Fatalf("no fault in faults makes %s fail", tc.name)
			}
			if !strings.Contains(faulted, "--- FAIL: TestFaultyBroker/"+tc.name+" ") {
				t.Errorf("with %s the case does not fail:\n%s", fault, faulted)
			}
		})
	}
}
