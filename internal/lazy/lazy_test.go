package lazy

import (
	"strings"
	"testing"
)

func TestValueBuildsOnceOnFirstUse(t *testing.T) {
	calls := 0
	f := Value("counter", func() int { calls++; return 42 })
	if calls != 0 {
		t.Fatalf("built at declaration: %d calls", calls)
	}
	if f() != 42 || f() != 42 || calls != 1 {
		t.Errorf("f() twice: %d calls, want 1", calls)
	}
}

func TestForceNamesWhatCannotBuild(t *testing.T) {
	good := Regexp(`^a+$`)
	Regexp(`^(unclosed$`)
	n, err := Force()
	if err == nil || !strings.Contains(err.Error(), `lazy value "^(unclosed$"`) || !strings.Contains(err.Error(), "missing closing )") {
		t.Errorf("Force() error = %v, want one naming the unclosed expression", err)
	}
	if n < 2 {
		t.Errorf("Force() counted %d values, want at least 2", n)
	}
	if !good().MatchString("aaa") {
		t.Error("the good expression does not match")
	}
}
