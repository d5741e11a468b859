// Package ddmin is the round structure of Zeller's delta debugging
// (ddmin), shared by explore's shrinking of a finding and soak's of a
// random schedule: which candidates a round tries, and where the next
// round goes from the first that still fails. Running the candidates is
// the caller's (each in real databases and processes).
package ddmin

import "slices"

// Candidates are round n's candidates of c: its n chunks, then (for
// n > 2) their complements.
func Candidates[T any](c []T, n int) [][]T {
	var chunks, comps [][]T
	for i := range n {
		lo, hi := i*len(c)/n, (i+1)*len(c)/n
		chunks = append(chunks, slices.Clone(c[lo:hi]))
		if n > 2 {
			comps = append(comps, append(slices.Clone(c[:lo]), c[hi:]...))
		}
	}
	return append(chunks, comps...)
}

// Next is where ddmin goes after round n of c, whose candidate i (cands,
// -1 for none) was the first that still failed: the set and granularity of
// the next round, or done when c is 1-minimal.
func Next[T any](c []T, cands [][]T, n, i int) (next []T, nextN int, done bool) {
	switch {
	case i >= 0 && i < n: // a chunk alone fails
		return cands[i], 2, false
	case i >= n: // a complement does
		return cands[i], max(n-1, 2), false
	case n < len(c):
		return c, min(2*n, len(c)), false
	}
	return c, n, true
}
