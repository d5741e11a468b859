// Package lazy builds a package's compiled values (regular expressions,
// templates) on their first use instead of at program start: every run of
// the runner binary paid for all of them before main (~7 ms of a `runner
// version`'s 34 ms of CPU here, and the memory they touched), though each
// command needs a few; `runner reference relay`, started twice per explore
// point, needs none. Every value is registered, so that a test builds them
// all (Force): an expression or a template that cannot compile still fails
// a test, not a user's first use of it.
package lazy

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
)

// built is every value made with Value, by name, for Force.
var (
	mu    sync.Mutex
	built []entry
)

type entry struct {
	name  string
	build func()
}

// Value returns a function that calls build on its first call and returns
// what it returned on every call; a build that panics panics again on each
// call (sync.OnceValue). name says which value it is in Force's error.
func Value[T any](name string, build func() T) func() T {
	f := sync.OnceValue(build)
	mu.Lock()
	built = append(built, entry{name, func() { f() }})
	mu.Unlock()
	return f
}

// Regexp is Value of regexp.MustCompile(expr).
func Regexp(expr string) func() *regexp.Regexp {
	return Value(expr, func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// Force builds every value registered so far (those of every package
// linked into the calling program) and returns how many there are, or an
// error naming each one whose build panicked.
func Force() (int, error) {
	mu.Lock()
	all := append([]entry(nil), built...)
	mu.Unlock()
	var errs []error
	for _, e := range all {
		if err := try(e.build); err != nil {
			errs = append(errs, fmt.Errorf("lazy value %q: %v", e.name, err))
		}
	}
	if len(errs) > 0 {
		return len(all), errors.Join(errs...)
	}
	return len(all), nil
}

func try(f func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%v", v)
		}
	}()
	f()
	return nil
}
