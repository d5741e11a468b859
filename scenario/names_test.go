package scenario

import (
	"strings"
	"testing"
)

// A consumer id every broker needs: a name, valid UTF-8, no control
// character — a load error at the consumer parameter. One that only some
// broker cannot take loads, and that broker skips it (the runner's
// TestConsumerIDsOneBrokerRefusesSkipThere).
func TestConsumerIDsAreNames(t *testing.T) {
	for step, want := range map[string]string{
		`consume: {consumer: ""}`:       `x.yaml:3:25: consumer: must not be empty`,
		`consume: {consumer: "a\tb"}`:   `x.yaml:3:15: consumer id "a\tb": control character '\t' at byte 1`,
		`claim: {consumer: "a\u0001b"}`: `control character`,
	} {
		_, errs := Parse("x.yaml", []byte("name: x\nsteps:\n  - "+step+"\n"), testKinds)
		if len(errs) != 1 || !strings.Contains(errs.Error(), want) {
			t.Errorf("%.60s:\n got %v\nwant one error containing %q", step, errs, want)
		}
	}
	for _, ok := range []string{"consume(consumer=accounting-v2)", "consume: {consumer: billing.v2}", "consume: {consumer: log}",
		"consume: {consumer: \"acc ounting\"}", "consume: {consumer: " + strings.Repeat("c", 300) + "}"} {
		if _, errs := Parse("x.yaml", []byte("name: x\nsteps:\n  - "+ok+"\n"), testKinds); len(errs) > 0 {
			t.Errorf("%.60s: want no error, got %v", ok, errs)
		}
	}
}
