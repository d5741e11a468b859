package scenario

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// doubling is the attack: vars each using the one before twice, n
// of them, the last used by a step (a 637-byte file took 25 s and 7.4 GB).
func doubling(n int) string {
	var b strings.Builder
	b.WriteString("name: x\nvars:\n  v0: \"0123456789abcdef\"\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "  v%d: \"${v%d}${v%d}\"\n", i, i-1, i-1)
	}
	fmt.Fprintf(&b, "steps:\n  - produce: {event: \"${v%d}\"}\n", n)
	return b.String()
}

// TestVarExpansionIsBounded: a chain of variables deeper than maxVarDepth
// is refused at the first variable past it, fast and small; so is a
// file whose uses of ${…} add more than the file cap, whether in vars or
// in the steps.
func TestVarExpansionIsBounded(t *testing.T) {
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, errs := Parse("d.yaml", []byte(doubling(30)), testKinds)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// v16 is line 19: each v_k is one deeper than v_(k-1), v0 at depth 1.
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `d.yaml:19:8: variable "v16" uses variables more than 16 deep`) {
		t.Errorf("doubling vars: %v", errs)
	}
	if took, grew := time.Since(start), after.TotalAlloc-before.TotalAlloc; took > 2*time.Second || grew > 64<<20 {
		t.Errorf("doubling vars took %v and %d MB", took, grew>>20)
	}

	x := strings.Repeat("x", 1000)
	wide := fmt.Sprintf("name: x\nvars:\n  a: %s\n  b: \"%s\"\n  c: \"%s\"\nsteps: [produce]\n", x, strings.Repeat("${a}", 64), strings.Repeat("${b}", 100))
	if _, errs := Parse("w.yaml", []byte(wide), testKinds); len(errs) != 1 || !strings.Contains(errs[0].Error(), `w.yaml:5:6: variable "c": expanding ${…} makes more than 4 MiB`) {
		t.Errorf("wide vars: %v", errs)
	}

	var uses strings.Builder
	fmt.Fprintf(&uses, "name: x\nvars:\n  a: %s\n  b: \"%s\"\nsteps:\n", x, strings.Repeat("${a}", 64))
	for range 80 {
		uses.WriteString("  - produce: {event: \"${b}\"}\n")
	}
	if _, errs := Parse("u.yaml", []byte(uses.String()), testKinds); len(errs) != 1 || !strings.Contains(errs[0].Error(), `u.yaml:70:22: ${b}: expanding ${…} makes more than 4 MiB`) {
		t.Errorf("many uses: %v", errs)
	}

	// A chain as deep as allowed, and the cap's worth, still load.
	if _, errs := Parse("ok.yaml", []byte(strings.Replace(doubling(15), "0123456789abcdef", "0", 1)), testKinds); len(errs) > 0 {
		t.Errorf("a chain 16 deep: %v", errs)
	}
}

// TestNodeBudgetCountsAliasesOnly: a long file written out in full (the
// random workload of soak --events 15000: 111,000 nodes) loads; aliases
// that expand past the budget (a "billion laughs" file) are still refused.
func TestNodeBudgetCountsAliasesOnly(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: long\nsteps:\n")
	for i := 1; i <= 15000; i++ {
		agg := ""
		if i%5 == 0 {
			agg = fmt.Sprintf(", aggregate: acct-%d", i%3)
		}
		fmt.Fprintf(&b, "  - produce: {event: ev-%d, amount: %d%s}\n", i, 1+i%500, agg)
	}
	scs, errs := Parse("random.yaml", []byte(b.String()), testKinds)
	if len(errs) > 0 || len(scs) != 1 || len(scs[0].Steps) != 15000 {
		t.Fatalf("15000 events written out: %d scenarios, errors %v", len(scs), errs)
	}

	laughs := "name: lol\nx-a: &a [l, l, l, l, l, l, l, l, l, l]\n"
	for i, prev := 'b', 'a'; i <= 'h'; i, prev = i+1, i {
		laughs += fmt.Sprintf("x-%c: &%c [*%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c]\n", i, i, prev, prev, prev, prev, prev, prev, prev, prev, prev, prev)
	}
	laughs += "steps: [produce]\n"
	if _, errs := Parse("lol.yaml", []byte(laughs), testKinds); len(errs) != 1 || !strings.Contains(errs[0].Error(), "aliases expand to more than 100000 YAML nodes beyond those written") {
		t.Errorf("billion laughs: %v", errs)
	}
}
