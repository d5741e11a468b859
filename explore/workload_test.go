package explore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The built-in workload's re-sends wait for the consumer group to have
// nothing left to hand out where the broker counts it: a consumer killed
// before it applied ev-2 gets it back only after its claim's idle time,
// and a forged copy delivered first was applied by the correct Go payments
// consumer (phantom). RabbitMQ and Kafka give a dead consumer's messages
// back in their place: no wait there.
func TestBuiltinResendsWaitForTheGroupWhereTheBrokerCountsIt(t *testing.T) {
	for b, wait := range map[string]bool{"redis": true, "nats": true, "rabbitmq": false, "kafka": false} {
		out := t.TempDir()
		if _, errs := Default(context.Background(), loadSystem(t), out, b); len(errs) > 0 {
			t.Fatal(errs)
		}
		body, err := os.ReadFile(filepath.Join(out, "workload.builtin"))
		if err != nil {
			t.Fatal(err)
		}
		at, resend := strings.Index(string(body), "stream.lag: 0"), strings.Index(string(body), "publish: {event: ev-1}")
		if got := at >= 0 && at < resend; got != wait || resend < 0 {
			t.Errorf("%s: a wait on stream.lag before the re-sends: %v, want %v\n%s", b, got, wait, body)
		}
	}
}

// Shrinking that leaves an event out leaves its re-sends out with it: a
// re-send of an event never committed is a copy of nothing, applied as a
// phantom by every consumer (a file written so failed on the correct
// build: BUG=ack-first's phantom shrank to `publish: {event: ev-1}` alone).
func TestAResendIsLeftOutWithItsEvent(t *testing.T) {
	w := defaultWorkload(t, t.TempDir())
	var resends []int
	for _, i := range w.Events {
		if w.calls[i].Def.Name == "publish" {
			resends = append(resends, i)
		}
	}
	if len(resends) != 2 || len(w.resends) != 2 {
		t.Fatalf("the built-in workload's re-sends: %v, tied %v", resends, w.resends)
	}
	v := variantOf(w, []element{{event: resends[0]}, {event: resends[1]}}, nil)
	for _, i := range resends {
		if !v.Drop[i] {
			t.Errorf("the re-send at step %d stays without the event it re-sends: %v", i, v.Drop)
		}
	}
	v = variantOf(w, []element{{event: w.resends[resends[0]]}, {event: resends[0]}}, nil)
	if v.Drop[resends[0]] || !v.Drop[resends[1]] {
		t.Errorf("with ev-1 kept its re-send stays, ev-2's goes: %v", v.Drop)
	}
}

// Two findings shrunk alike (the same first fault, the same invariants)
// are two files: the second overwrote the first, and a finding once
// written is rewritten in place (its FLAKY header).
func TestTwoFindingsShrunkAlikeAreTwoFiles(t *testing.T) {
	out := t.TempDir()
	w := defaultWorkload(t, out)
	e := &explorer{p: Params{Out: out}}
	a, b := &Finding{Broken: []string{"phantom"}}, &Finding{Broken: []string{"phantom"}}
	for _, f := range []*Finding{a, b, a} {
		if err := e.write(w, f); err != nil {
			t.Fatal(err)
		}
	}
	if filepath.Base(a.File) != "explore-phantom.yaml" || filepath.Base(b.File) != "explore-phantom-2.yaml" {
		t.Errorf("files %s and %s, want explore-phantom.yaml and explore-phantom-2.yaml", a.File, b.File)
	}
}
