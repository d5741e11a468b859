package testutil

import (
	"flag"
	"runtime"
	"strconv"
)

// DefaultParallel, called from TestMain before m.Run, sets -test.parallel
// to n when the command line did not set it and n is above its default
// (GOMAXPROCS): for a package whose parallel tests mostly wait (on
// services, on servers booting, on a scenario's within:), not compute.
func DefaultParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set && n > runtime.GOMAXPROCS(0) {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
