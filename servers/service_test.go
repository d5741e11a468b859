package servers

import (
	"context"
	"fmt"
	"github.com/outboxdrill/runner/internal/testutil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func startSh(t *testing.T, script, ready string, env ...string) (*Service, error) {
	t.Helper()
	return StartService(context.Background(), ServiceSpec{Name: "svc", Argv: []string{"sh", "-c", script}, Dir: t.TempDir(),
		Env: env, Ready: ready, ReadyTimeout: 3 * time.Second, Secrets: []string{"s3cret"}})
}

// A service is ready at the first line containing its ready text, sees its
// env, and its output is kept with secrets hidden.
func TestServiceReadyOnItsLogLine(t *testing.T) {
	s, err := startSh(t, `echo starting; echo "url=$DATABASE_URL"; sleep 0.2; echo "listening: ready"; sleep 30`, "ready", "DATABASE_URL=postgres://u:s3cret@127.0.0.1:1/db")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill(context.Background())
	out := s.Output()
	if !strings.Contains(out, "listening: ready") || !strings.Contains(out, "url=postgres://u:***@") || strings.Contains(out, "s3cret") {
		t.Errorf("output %q: want the ready line and the URL with its password hidden", out)
	}
}

// Output hides a secret in every encoding a service may print it in, and
// any password by its place (a short one included); an output cut to its
// latest 64 KiB never starts with the tail of a secret.
func TestServiceOutputHidesSecrets(t *testing.T) {
	const pw = "P@ss/w0rd:1"
	o := &serviceOutput{readyCh: make(chan struct{})}
	s := &Service{spec: ServiceSpec{Secrets: []string{pw}}, out: o}
	_, _ = o.Write([]byte("raw " + pw + "\nencoded P%40ss%2Fw0rd%3A1 and P%40ss%2fw0rd%3a1\nquery postgres://u@h:1/p?password=" + url.QueryEscape(pw) + "&sslmode=disable\n" +
		"short postgres://u:pw@h:1/p and password=pw\n"))
	out := s.Output()
	for _, leak := range []string{"ss/w0rd", "ss%2Fw0rd", "ss%2fw0rd", ":pw@", "=pw"} {
		if strings.Contains(out, leak) {
			t.Errorf("%s shows in:\n%s", leak, out)
		}
	}
	if !strings.Contains(out, "short postgres://u:***@h:1/p and password=***") {
		t.Errorf("the short password by its place:\n%s", out)
	}
	// The oldest bytes go; the cut falls 4 bytes into the secret.
	o = &serviceOutput{readyCh: make(chan struct{})}
	s = &Service{spec: ServiceSpec{Secrets: []string{pw}}, out: o}
	first := strings.Repeat("x", 100) + pw + " more\n"
	_, _ = o.Write([]byte(first))
	_, _ = o.Write([]byte(strings.Repeat("y", serviceLog-len(first)+100+4)))
	if out := s.Output(); strings.Contains(out, "w0rd") || !strings.HasPrefix(out, "yyy") {
		t.Errorf("after the cut the output starts %q", out[:min(40, len(out))])
	}
}

// A service that exits, or never says it is ready, is an error quoting its
// output; one without ready text is ready once started.
func TestServiceNotReady(t *testing.T) {
	t.Parallel() // waits out a ready timeout
	if _, err := startSh(t, `echo "boom: bad config"; exit 3`, "ready"); err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "boom: bad config") {
		t.Errorf("exit: %v", err)
	}
	if _, err := startSh(t, `echo "still booting"; sleep 30`, "ready"); err == nil || !strings.Contains(err.Error(), `no line containing "ready"`) {
		t.Errorf("timeout: %v", err)
	}
	s, err := startSh(t, `sleep 30`, "")
	if err != nil {
		t.Fatal(err)
	}
	if done, _ := s.Exited(); done {
		t.Error("a running service reports exited")
	}
	_ = s.Kill(context.Background())
	if done, _ := s.Exited(); !done {
		t.Error("a killed service still runs")
	}
}

// A service that was ready as it exited is ready, whatever the order in
// which the runner hears the two: with no ready text it is ready at once,
// and a ready line it printed before exiting counts. (Before, select chose
// the exit about half the time.)
func TestServiceReadyAsItExited(t *testing.T) {
	t.Parallel()
	for i := range 20 {
		for _, c := range []struct{ script, ready string }{{`exit 0`, ""}, {`echo ready; exit 0`, "ready"}} {
			// Started runs before the wait for readiness: the exit is
			// there to hear when the wait begins.
			s, err := StartService(context.Background(), ServiceSpec{Name: "svc", Argv: []string{"sh", "-c", c.script}, Dir: t.TempDir(),
				Ready: c.ready, ReadyTimeout: 3 * time.Second, Started: func(s *Service) { <-s.child.done }})
			if err != nil {
				t.Fatalf("run %d of %q: %v", i, c.script, err)
			}
			_ = s.Kill(context.Background())
		}
	}
}

// Kill takes the whole process group: what the service forked dies too.
func TestServiceKillTakesItsGroup(t *testing.T) {
	s, err := startSh(t, `sleep 30 & echo "child $!"; echo ready; wait`, "ready")
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for _, f := range strings.Fields(s.Output()) {
		if n, err := strconv.Atoi(f); err == nil {
			pid = n
		}
	}
	if pid == 0 || syscall.Kill(pid, 0) != nil {
		t.Fatalf("no live forked child in %q", s.Output())
	}
	_ = s.Kill(context.Background())
	if alive(pid) {
		t.Errorf("forked child %d outlived the kill", pid)
	}
}

// Stop asks with SIGTERM first: a service that handles it exits cleanly;
// one that ignores it is killed after the grace.
func TestServiceStop(t *testing.T) {
	s, err := startSh(t, `trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.05; done`, "ready")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background(), 3*time.Second); err != nil || !strings.Contains(s.Output(), "bye") {
		t.Errorf("stop: %v; output %q", err, s.Output())
	}
	s, err = startSh(t, `trap '' TERM; echo ready; while :; do sleep 0.05; done`, "ready")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background(), 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("stop of a service ignoring SIGTERM: %v", err)
	}
}

// zombieChildren lists this process's children that are zombies.
func zombieChildren() []string {
	var out []string
	for _, p := range snapshot() {
		if p.ppid == os.Getpid() && p.state == "Z" {
			out = append(out, fmt.Sprintf("%d (%s)", p.pid, p.comm))
		}
	}
	return out
}

// killMarked is a test's cleanup: what it failed to see go.
func killMarked(t *testing.T, mark string) {
	t.Cleanup(func() {
		for _, pid := range testutil.Marked(mark) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// A service's every descendant goes with it, at kill and stop and also
// when the service exited by itself: a grandchild that double-forked and
// setsid's (a daemon), a child in a process group of its own (job
// control), and one that cleared its environment; and the orphans among
// them, re-parented to the runner, are reaped.
func TestServiceEndTakesEveryDescendant(t *testing.T) {
	// An earlier test's orphans (a discarded PostgreSQL's SIGKILLed
	// backends) are reaped within orphanGrace of their death: wait for
	// that, so that a zombie below is this test's.
	for deadline := time.Now().Add(5 * orphanGrace); len(zombieChildren()) > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if z := zombieChildren(); len(z) > 0 {
		t.Fatalf("zombie children before the test, not reaped within %s: %v", 5*orphanGrace, z)
	}
	for i, end := range []string{"kill", "stop", "exited"} {
		t.Run(end, func(t *testing.T) {
			mark := testutil.Mark(2 + i)
			killMarked(t, mark)
			script := `( setsid sh -c 'exec sleep ` + mark + `1' </dev/null >/dev/null 2>&1 & )
set -m; sleep ` + mark + `2 & set +m
env -i sleep ` + mark + `3 &
echo ready`
			if end != "exited" {
				script += "; wait"
			}
			s, err := startSh(t, script, "ready")
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(5 * time.Second); len(testutil.Marked(mark)) < 3 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if n := len(testutil.Marked(mark)); n != 3 {
				t.Fatalf("%d of the service's 3 descendants run", n)
			}
			switch end {
			case "kill":
				_ = s.Kill(context.Background())
			case "stop":
				if err := s.Stop(context.Background(), time.Second); err != nil {
					t.Errorf("stop: %v", err)
				}
			case "exited":
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					if done, _ := s.Exited(); done || time.Now().After(deadline) {
						break
					}
				}
				_ = s.Kill(context.Background()) // the scenario's end
			}
			if left := testutil.Marked(mark); len(left) > 0 {
				t.Errorf("after %s: descendants %v still run", end, left)
			}
			if z := zombieChildren(); len(z) > 0 {
				t.Errorf("after %s: zombie children %v", end, z)
			}
		})
	}
}

// await is a ReadyOn the test meets by hand, or fails with err.
type await struct {
	met chan struct{}
	err error
}

func (a *await) Met() <-chan struct{} { return a.met }
func (a *await) Err() error           { return a.err }
func (a *await) What() string         { return "crossing of X" }
func (a *await) Instead() string      { return "its proxies saw Y ×2" }

// With a log line and a further condition (sysrun's ready: {on: …}), a
// start returns only once both happened, whichever came first; one that
// never comes is said with what came instead, under the one timeout; one
// that can never come ends the wait at once, saying why.
func TestServiceReadyOnBoth(t *testing.T) {
	t.Parallel() // waits out a ready timeout
	start := func(ready string, a *await, timeout time.Duration, started func(*Service)) (*Service, error) {
		return StartService(context.Background(), ServiceSpec{Name: "svc", Argv: []string{"sh", "-c", "echo up; sleep 30"}, Dir: t.TempDir(),
			Ready: ready, ReadyOn: a, ReadyTimeout: timeout, Started: started})
	}
	// The line comes first; the condition is met only once the line is in
	// the output: the start must return after that.
	a := &await{met: make(chan struct{})}
	var metAt time.Time
	s, err := start("up", a, time.Minute, func(s *Service) {
		go func() {
			for !strings.Contains(s.Output(), "up") {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond)
			metAt = time.Now()
			close(a.met)
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	if returned := time.Now(); metAt.IsZero() || returned.Before(metAt) {
		t.Errorf("returned at %s, before the condition was met (%s)", returned.Format(time.StampMicro), metAt.Format(time.StampMicro))
	}
	_ = s.Kill(context.Background())
	// Neither, both said; the condition alone, said.
	_, err = start("ready", &await{met: make(chan struct{})}, 200*time.Millisecond, nil)
	if want := `service svc: no line containing "ready" on its output and no crossing of X (its proxies saw Y ×2) within 200ms; its output:` + "\nup\n"; err == nil || err.Error() != want {
		t.Errorf("neither:\n%v\nwant\n%s", err, want)
	}
	_, err = start("up", &await{met: make(chan struct{})}, 200*time.Millisecond, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "service svc: no crossing of X (its proxies saw Y ×2) within 200ms; its output:") {
		t.Errorf("the condition alone: %v", err)
	}
	// A condition that can never be met fails the start before the timeout.
	never := &await{met: make(chan struct{}), err: fmt.Errorf("cannot classify")}
	close(never.met)
	t0 := time.Now()
	_, err = start("", never, time.Minute, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "service svc: ready: its crossing of X can never be counted: cannot classify; its output:") || time.Since(t0) > 30*time.Second {
		t.Errorf("never: %v after %s", err, time.Since(t0))
	}
}
