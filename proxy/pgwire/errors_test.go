package pgwire

import (
	"fmt"
	"strings"
	"testing"
)

// The tally a stuck verdict quotes counts each kind of server error, the
// most frequent first, and keeps no more than it is bounded to whatever a
// client makes the server say: kinds past the bound are counted, a long
// message is cut.
func TestErrorTallyIsCountedAndBounded(t *testing.T) {
	p := &Proxy{}
	for range 3 {
		p.errs.add("23514", `new row violates check constraint "currency_code"`)
	}
	p.errs.add("22012", "division by zero")
	got := p.Errors()
	want := []string{`23514 new row violates check constraint "currency_code" ×3`, "22012 division by zero ×1"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Errors() = %q, want %q", got, want)
	}
	for i := range 100 {
		p.errs.add("XX000", fmt.Sprintf("kind %d %s", i, strings.Repeat("x", 10_000)))
	}
	got = p.Errors()
	if len(got) != maxErrorKinds+1 || got[len(got)-1] != fmt.Sprintf("%d more of other kinds", 100-(maxErrorKinds-2)) {
		t.Errorf("bounded to %d kinds and a count of the rest, got %d: last %q", maxErrorKinds, len(got), got[len(got)-1])
	}
	for _, e := range got {
		if len(e) > maxErrorMessage+40 {
			t.Errorf("a message kept whole: %d bytes", len(e))
		}
	}
}

// When each error came is kept, in order, up to a bound past which only
// that more came is: a relay's failed statement explains a re-publish
// (sysrun's disruptions), and a client cannot make the proxy hold more.
func TestErrorTimesAreKeptAndBounded(t *testing.T) {
	p := &Proxy{}
	if times, more := p.ErrorTimes(); len(times) != 0 || more {
		t.Fatalf("no error yet: %v, %v", times, more)
	}
	p.errs.add("40001", "could not serialize access due to concurrent update")
	p.errs.add("55P03", "lock not available")
	times, more := p.ErrorTimes()
	if len(times) != 2 || more || times[1].Before(times[0]) {
		t.Errorf("two errors: times %v, more %v", times, more)
	}
	for range maxErrorTimes {
		p.errs.add("40001", "could not serialize access due to concurrent update")
	}
	if times, more = p.ErrorTimes(); len(times) != maxErrorTimes || !more {
		t.Errorf("past the bound: %d times kept, more %v; want %d and true", len(times), more, maxErrorTimes)
	}
}
