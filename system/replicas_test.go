package system

import (
	"slices"
	"strings"
	"testing"
)

const replicated = "services:\n  relay: {run: [x], env: {N: \"${replica}\"}, replicas: 2}\n  consumer: {run: [y]}\n" +
	"produce: \"SELECT ${event}\"\noutbox: {table: o, event_id: e, payload: p, unpublished: \"true\"}\nstream: {event_id: e, payload: p}\ninbox: {table: i, consumer: c, event_id: e, payload: p}\n"

// replicas: N loads as N services NAME-1 … NAME-N, each with its number,
// and a step naming NAME resolves to all of them.
func TestReplicas(t *testing.T) {
	s, errs := Parse("f.yaml", []byte(replicated), testKinds)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if got := s.Names(); !slices.Equal(got, []string{"consumer", "relay-1", "relay-2"}) {
		t.Errorf("services %v", got)
	}
	if got := s.Resolve("relay"); !slices.Equal(got, []string{"relay-1", "relay-2"}) {
		t.Errorf("Resolve(relay) = %v", got)
	}
	if got := s.Resolve("relay-2"); !slices.Equal(got, []string{"relay-2"}) {
		t.Errorf("Resolve(relay-2) = %v", got)
	}
	if s.Resolve("relay-3") != nil || s.Resolve("consumer-1") != nil {
		t.Errorf("Resolve of a name the file lacks is not nil")
	}
	if r := s.Services["relay-2"]; r.Group != "relay" || r.Replica != 2 || r.Env["N"] != "${replica}" {
		t.Errorf("relay-2: %+v", r)
	}
	if why := s.FaultTarget("relay"); why != "relay has 2 replicas: arm the fault on one of them: relay-1, relay-2" {
		t.Errorf("FaultTarget(relay) = %q", why)
	}
	if s.FaultTarget("relay-1") != "" || s.FaultTarget("consumer") != "" {
		t.Errorf("a fault on one process is refused")
	}
	if got := s.StepNames(); !slices.Equal(got, []string{"consumer", "relay", "relay-1", "relay-2"}) {
		t.Errorf("step names %v", got)
	}
	one, errs := Parse("f.yaml", []byte(strings.Replace(replicated, "replicas: 2", "replicas: 1", 1)), testKinds)
	if len(errs) > 0 || !slices.Equal(one.Names(), []string{"consumer", "relay"}) || one.Groups != nil {
		t.Errorf("replicas: 1 is the service itself: %v %v", errs, one.Names())
	}
}

func TestReplicasErrors(t *testing.T) {
	for _, c := range []struct{ name, from, to, want string }{
		{"zero", "replicas: 2", "replicas: 0", `f.yaml:2:55: services: relay: replicas: want a whole number from 1 to 16 (how many processes of it run side by side), got "0"`},
		{"not a number", "replicas: 2", "replicas: two", `f.yaml:2:55: services: relay: replicas: want a whole number from 1 to 16`},
		{"fraction", "replicas: 2", "replicas: 1.5", `f.yaml:2:55: services: relay: replicas: want a whole number`},
		{"a list", "replicas: 2", "replicas: [2]", `f.yaml:2:55: services: relay: replicas: want a whole number`},
		{"misspelt", "replicas: 2", "replica: 2", `f.yaml:2:45: relay: unknown key "replica" (did you mean "replicas"?)`},
		{"collision", "consumer: {run: [y]}", "relay-2: {run: [y]}", "f.yaml:2:55: services: relay: replicas: 2 names its replicas relay-1, relay-2, but relay-2 is another service of the file (at f.yaml:3:3): rename one of them"},
		{"in a variant", "replicas: 2}", "variants: {kafka: {run: [z], replicas: 2}}}", `relay: variants: kafka: unknown key "replicas"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, errs := Parse("f.yaml", []byte(strings.Replace(replicated, c.from, c.to, 1)), testKinds)
			if len(errs) == 0 || !strings.Contains(errs.Error(), c.want) {
				t.Errorf("errors:\n%v\nwant one containing %q", errs, c.want)
			}
		})
	}
}
