package servers

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// CPUWait is, for each service, how long its live processes (every thread
// of every process of its tree) have spent runnable but waiting for a CPU
// since they started: the run_delay of /proc/PID/task/TID/schedstat. On a
// machine asked for more than its cores (a CI runner starting a dozen Node
// processes at once), a service that did nothing for seconds may simply
// not have run: settling counts that time as not given to it. One scan of
// /proc serves every service. ok is false where the kernel keeps no such
// count (schedstat needs CONFIG_SCHED_INFO; every distribution kernel has
// it) or /proc cannot be read whole: then nobody is given more time.
//
// The delay of a thread or process that has ended is gone with it, and the
// delays of threads that waited at the same time add up: a service's wait
// may be less or more than the time it lost (callers cap it at the time
// that passed).
func CPUWait(svcs ...*Service) (waits []time.Duration, ok bool) {
	if len(svcs) == 0 {
		return nil, true
	}
	procs, complete := scan()
	if !complete {
		return nil, false
	}
	waits = make([]time.Duration, len(svcs))
	for i, s := range svcs {
		for pid, p := range members([]tree{s.tree}, procs) {
			if !p.alive() {
				continue
			}
			d, read := runDelay(pid)
			if !read {
				return nil, false
			}
			waits[i] += d
		}
	}
	return waits, true
}

// runDelay sums the run_delay of every thread of pid; read is false when
// the kernel keeps none (a process that ended meanwhile reads as 0).
func runDelay(pid int) (d time.Duration, read bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	f, err := os.Open(dir)
	if err != nil {
		return 0, true // ended meanwhile
	}
	tids, _ := f.Readdirnames(-1)
	f.Close()
	read = true
	for _, tid := range tids {
		ok := readProcFile(strconv.Itoa(pid)+"/task/"+tid+"/schedstat", func(b []byte) {
			// "on-CPU ns, run-queue wait ns, timeslices"
			f := bytes.Fields(b)
			if len(f) < 2 {
				read = false
				return
			}
			n, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err != nil {
				read = false
			}
			d += time.Duration(n)
		})
		if !ok {
			if _, err := os.Stat(dir + "/" + tid); err == nil {
				return 0, false // there, but no schedstat: the kernel keeps none
			}
		}
	}
	return d, read
}
