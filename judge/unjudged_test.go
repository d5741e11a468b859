package judge

import (
	"strings"
	"testing"
)

// A declared invariant of which settling left a part undecided ("stranded
// (entry 1-0 of c)") was not judged: the failure says so, not that the
// history shows none.
func TestADeclaredPartlyUnjudgedInvariantSaysSo(t *testing.T) {
	nj := map[string]string{"stranded (entry 1-0 of c)": "still pending, idle 900ms when settling ended", "unbalanced": "books not read"}
	if why, ok := unjudged(nj, "stranded"); !ok || !strings.Contains(why, "entry 1-0 of c") || !strings.Contains(why, "idle 900ms") {
		t.Errorf("stranded: %q, %v", why, ok)
	}
	if _, ok := unjudged(nj, "unbalanced"); !ok {
		t.Error("unbalanced: judged")
	}
	if _, ok := unjudged(nj, "lost"); ok {
		t.Error("lost: not judged, though nothing says so")
	}
}
