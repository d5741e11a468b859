package runner

import (
	"slices"
	"testing"

	"github.com/outboxdrill/runner/scenario"
)

// TestPickerHandsOutTheLoneScenariosFirst: the scenarios that run alone
// come first, together, each group in file order; a broker still starting
// does not hold up the jobs of those that are up.
func TestPickerHandsOutTheLoneScenariosFirst(t *testing.T) {
	plain, alone := &scenario.Scenario{Name: "plain"}, &scenario.Scenario{Name: "alone", Exclusive: true}
	jobs := []job{{plain, "redis"}, {alone, "redis"}, {plain, "kafka"}, {alone, "kafka"}, {plain, "nats"}}
	w := &World{up: map[string]chan struct{}{"kafka": make(chan struct{})}} // kafka still starting
	pk := newPicker(w, jobs)
	var got []int
	for {
		i, ok := pk.take()
		if !ok {
			break
		}
		got = append(got, i)
		if len(got) == 2 {
			close(w.up["kafka"]) // now up: the rest in order
		}
	}
	if want := []int{1, 0, 3, 2, 4}; !slices.Equal(got, want) {
		t.Errorf("handed out %v, want %v (the lone ones first, kafka's once it is up)", got, want)
	}
}
