package pace

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the kernel's USER_HZ, the unit of /proc's CPU times: 100
// on every Linux the runner supports (sysconf(_SC_CLK_TCK)).
const clockTick = 100

// ReadProc samples the machine and the process tree under root (the
// runner's own pid: its servers and services are its descendants) from
// /proc. A process's CPU counts its reaped children's (cutime, cstime),
// so a service killed and waited for between two samples still counts.
func ReadProc(root int) (Sample, error) {
	s := Sample{At: time.Now()}
	busy, err := machineBusy()
	if err != nil {
		return s, err
	}
	s.Machine = busy
	if s.Available, s.Total, err = memInfo(); err != nil {
		return s, err
	}
	procs, err := processes()
	if err != nil {
		return s, err
	}
	children := map[int][]int{}
	for pid, p := range procs {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	stack := []int{root}
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if p, ok := procs[pid]; ok {
			s.CPU += p.cpu
			s.RSS += p.rss
		}
		stack = append(stack, children[pid]...)
	}
	return s, nil
}

// machineBusy is the time every CPU spent on anything but idle and iowait.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return 0, errors.New("/proc/stat: no cpu line")
	}
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i == 3 || i == 4 || i >= 7 { // idle, iowait; steal and guests are not ours to use
			continue
		}
		busy += n
	}
	return ticks(busy), nil
}

func memInfo() (avail, total int64, err error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "MemAvailable":
			avail = kb << 10
		case "MemTotal":
			total = kb << 10
		}
	}
	if total == 0 {
		return 0, 0, errors.New("/proc/meminfo: no MemTotal")
	}
	return avail, total, sc.Err()
}

type proc struct {
	ppid int
	cpu  time.Duration
	rss  int64
}

// processes reads every process's parent, CPU time (its own and its
// reaped children's) and resident memory. One that ends while it is read
// is left out.
func processes() (map[int]proc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	page := int64(os.Getpagesize())
	out := make(map[int]proc, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if p, ok := parseStat(b, page); ok {
			out[pid] = p
		}
	}
	return out, nil
}

// parseStat reads /proc/PID/stat: the fields after the command's closing
// parenthesis (the command may hold spaces and parentheses).
func parseStat(b []byte, page int64) (proc, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] state, f[1] ppid, f[11..14] utime stime cutime cstime, f[21] rss
	if len(f) < 22 {
		return proc{}, false
	}
	num := func(k int) int64 { n, _ := strconv.ParseInt(f[k], 10, 64); return n }
	return proc{ppid: int(num(1)), cpu: ticks(num(11) + num(12) + num(13) + num(14)), rss: num(21) * page}, true
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / clockTick }
