package steps

import "testing"

// Every consumer parameter defaults to DefaultConsumer: the runner declares
// that consumer's queue when a scenario names none.
func TestConsumerDefaultsAreDefaultConsumer(t *testing.T) {
	n := 0
	for _, d := range Defs() {
		for _, p := range d.Params {
			if p.Name == "consumer" {
				n++
				if p.Default != DefaultConsumer {
					t.Errorf("%s.consumer defaults to %q, want DefaultConsumer %q", d.Name, p.Default, DefaultConsumer)
				}
			}
		}
	}
	if n < 4 {
		t.Errorf("found %d consumer parameters, want consume, claim, inbox.purge and reconcile at least", n)
	}
}
