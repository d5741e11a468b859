package ddmin

import (
	"slices"
	"testing"
)

// ddmin over ints, failing while 3 and 7 are both kept, ends at [3 7].
func TestNextFindsTheMinimalSet(t *testing.T) {
	fails := func(c []int) bool { return slices.Contains(c, 3) && slices.Contains(c, 7) }
	c := []int{1, 2, 3, 4, 5, 6, 7, 8}
	for n := 2; len(c) >= 2; {
		cands := Candidates(c, n)
		var done bool
		c, n, done = Next(c, cands, n, slices.IndexFunc(cands, fails))
		if done {
			break
		}
	}
	if !slices.Equal(c, []int{3, 7}) {
		t.Errorf("ddmin kept %v, want [3 7]", c)
	}
}

func TestCandidatesAreChunksThenComplements(t *testing.T) {
	got := Candidates([]int{1, 2, 3}, 3)
	want := [][]int{{1}, {2}, {3}, {2, 3}, {1, 3}, {1, 2}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Candidates = %v, want %v", got, want)
	}
	if got := Candidates([]int{1, 2, 3, 4}, 2); len(got) != 2 {
		t.Errorf("n=2 has no complements (they are the chunks): %v", got)
	}
}
