package sysrun

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/steps"
)

// MaxRestarts bounds how often in a row the supervisor restarts one
// service: a service that dies at every start is a crash loop, not a
// recovery. A process that ran for healthyAfter ends the row.
const (
	MaxRestarts  = 10
	healthyAfter = time.Second
)

// Restarts back off from restartBackoff, doubling up to restartBackoffMax,
// as systemd's RestartSec or a Kubernetes crash-loop back-off would; short,
// since a drill waits for the recovery.
const (
	restartBackoff    = 50 * time.Millisecond
	restartBackoffMax = time.Second
	superviseEvery    = 20 * time.Millisecond
)

// supervisor restarts one service whenever its process ends.
type supervisor struct {
	name     string
	env      map[string]string
	cancel   context.CancelFunc
	restarts int
	then     *fault.Fault // armed on the next restart, then cleared
	// burst counts the restarts since a process last ran long enough to
	// be no crash loop (MaxRestarts bounds it); started is when the
	// running one started.
	burst   int
	started time.Time
	// last is the process that ended while its successor is being
	// started: settling counts it as running meanwhile (the service is
	// coming back), or the gap would look like a quiet system.
	last *service
}

type restartKey struct{}

// restartOf is the supervisor's restart number a Start runs for, 0 for a
// start step.
func restartOf(ctx context.Context) int {
	n, _ := ctx.Value(restartKey{}).(int)
	return n
}

// StartSupervised starts the service with f armed, as Start does, and
// supervises it: it is started again (without the fault: the fault was
// its first process's) whenever its process ends — killed by a fault, dead
// of a cut connection, exited by itself, also before it was ready — as
// systemd's Restart=always or a Kubernetes pod would, until a stop or kill
// step ends it or the run closes; at most MaxRestarts times.
// fs.Also is armed with fs.Fault; fs.Then on the first restart. Without
// restart: true (fs.Also alone) the service is started, not supervised.
func (r *Run) StartSupervised(ctx context.Context, name string, env map[string]string, fs steps.StartFaults) (string, error) {
	if names, ok := r.group(name); ok {
		if fs.Fault != nil || fs.Also != nil || fs.Then != nil {
			return "", r.oneProcess(name)
		}
		return each(names, func(n string) (string, error) { return r.StartSupervised(ctx, n, env, fs) })
	}
	detail, err := r.start(ctx, name, env, fs.Fault, fs.Also)
	if !fs.Restart {
		return detail, err
	}
	restarts, wait := 0, restartBackoff
	for err != nil && restarts < MaxRestarts && r.ranAndEnded(name) {
		select {
		case <-ctx.Done():
			return detail, err
		case <-time.After(wait):
		}
		wait = min(2*wait, restartBackoffMax)
		restarts++
		then := fs.Then
		if restarts > 1 {
			then = nil
		}
		detail, err = r.Start(context.WithValue(ctx, restartKey{}, restarts), name, env, then)
		if err == nil {
			detail += fmt.Sprintf(" (restart %d: its first process ended before it was ready)", restarts)
		}
	}
	if err != nil {
		return detail, err
	}
	then := fs.Then
	if restarts > 0 {
		then = nil // armed on the restart already
	}
	return detail + "; supervised (started again whenever it ends)", r.supervise(ctx, name, env, restarts, then)
}

// Arm arms f on the service's running process (the fault step); a
// supervised service being restarted is waited for. A fault whose process
// ends before it struck follows the service: it is armed again on the next
// process, counting from its start.
func (r *Run) Arm(ctx context.Context, name string, f *fault.Fault) (string, error) {
	if err := r.oneProcess(name); err != nil {
		return "", err
	}
	for {
		r.mu.Lock()
		s, sup := r.svcs[name], r.supervised[name]
		restarting := sup != nil && sup.last != nil
		r.mu.Unlock()
		if s != nil && !restarting {
			if exited, _ := s.proc.Exited(); !exited || sup == nil {
				if err := r.arm(name, s, f); err != nil {
					return "", err
				}
				r.mu.Lock()
				r.following = append(r.following, r.faults[len(r.faults)-1])
				r.mu.Unlock()
				return fmt.Sprintf("armed %s on %s (pid %d)", f, name, s.proc.PID()), nil
			}
		}
		if s == nil && !restarting {
			return "", fmt.Errorf("service %s is not running", name)
		}
		select {
		case <-ctx.Done():
			return "", context.Cause(ctx)
		case <-time.After(superviseEvery):
		}
	}
}

// ranAndEnded reports whether the service's latest process ran and ended
// (a start that failed before any process ran is no crash to restart).
func (r *Run) ranAndEnded(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.insts) - 1; i >= 0; i-- {
		if in := r.insts[i]; in.service == name {
			in.mu.Lock()
			defer in.mu.Unlock()
			exited, _ := in.proc.Exited()
			return exited
		}
	}
	return false
}

// supervise watches the service's running process from now on.
func (r *Run) supervise(ctx context.Context, name string, env map[string]string, restarts int, then *fault.Fault) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.svcs[name]
	if s == nil {
		return fmt.Errorf("service %s is not running: nothing to supervise", name)
	}
	if r.closed {
		return nil
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sup := &supervisor{name: name, env: env, cancel: cancel, restarts: restarts, burst: restarts, then: then, started: time.Now()}
	if r.supervised == nil {
		r.supervised = map[string]*supervisor{}
	}
	if old := r.supervised[name]; old != nil {
		old.cancel()
	}
	r.supervised[name] = sup
	r.supWG.Add(1)
	go r.watchOver(sctx, sup, s)
	return nil
}

// watchOver watches s and restarts the service once it has ended.
func (r *Run) watchOver(ctx context.Context, sup *supervisor, s *service) {
	defer r.supWG.Done()
	tick := time.NewTicker(superviseEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if exited, _ := s.proc.Exited(); !exited {
			continue
		}
		if !r.mine(sup, s) {
			return
		}
		if time.Since(sup.started) >= healthyAfter {
			sup.burst = 0
		}
		next := r.restart(ctx, sup)
		if next == nil {
			return
		}
		s = next
	}
}

// mine reports whether sup still supervises s (no stop or kill step took
// it), and marks s as the process being replaced.
func (r *Run) mine(sup *supervisor, s *service) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.supervised[sup.name] != sup || r.svcs[sup.name] != s {
		return false
	}
	sup.last = s
	return true
}

// restart starts the service again, backing off between failed tries; nil
// when it gave up, or supervision ended meanwhile.
func (r *Run) restart(ctx context.Context, sup *supervisor) *service {
	defer r.forget(sup)
	wait := restartBackoff
	for sup.burst < MaxRestarts {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, restartBackoffMax)
		sup.restarts++
		sup.burst++
		sup.started = time.Now()
		then := sup.then
		sup.then = nil // the restart it was armed on is its process, started or not
		if _, err := r.Start(context.WithValue(ctx, restartKey{}, sup.restarts), sup.name, sup.env, then); err != nil {
			continue
		}
		r.mu.Lock()
		s, still := r.svcs[sup.name], r.supervised[sup.name] == sup && !r.closed
		r.mu.Unlock()
		if !still {
			if t, err := r.take(sup.name); err == nil {
				t.inst.end("killed: its supervision had ended while it started")
				_ = t.proc.Kill(context.WithoutCancel(ctx))
				t.close()
			}
			return nil
		}
		return s
	}
	r.mu.Lock()
	if r.supervised[sup.name] == sup { // given up: nobody restarts it any more
		delete(r.supervised, sup.name)
		if r.gaveUp == nil {
			r.gaveUp = map[string]int{}
		}
		r.gaveUp[sup.name] = sup.burst // a crash loop is no progress: settling says so
	}
	r.mu.Unlock()
	return nil
}

// forget clears the process being replaced: the new one runs, or none will.
func (r *Run) forget(sup *supervisor) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sup.last = nil
}

// unsupervise ends the supervision of a service a step stops or kills;
// the caller holds r.mu.
func (r *Run) unsupervise(name string) {
	if sup := r.supervised[name]; sup != nil {
		sup.cancel()
		delete(r.supervised, name)
	}
}

// stopSupervisors ends every supervision and waits for restarts under way,
// so that Close finds every process they started.
func (r *Run) stopSupervisors() {
	r.mu.Lock()
	r.closed = true
	for name := range r.supervised {
		r.unsupervise(name)
	}
	r.mu.Unlock()
	r.supWG.Wait()
}

// replacing are the processes being restarted: ended, with a successor on
// its way; the caller holds r.mu.
func (r *Run) replacing() map[*service]bool {
	out := map[*service]bool{}
	for _, sup := range r.supervised {
		if sup.last != nil {
			out[sup.last] = true
		}
	}
	return out
}

// Holding reports whether a delay fault still holds a reply: its service
// is in the middle of a call, so the system is not quiescent yet.
func (r *Run) Holding() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.faults {
		if a.a.Holding() {
			return true
		}
	}
	return false
}

// follow arms again, on s (a new process of the service), every fault a
// fault step armed on an earlier one that ended before it struck; the old
// arming is dropped (it can no longer strike, and is no fault that never
// fired).
func (r *Run) follow(name string, s *service) error {
	r.mu.Lock()
	var moved []*armed
	for i, a := range r.following {
		if a.service == name && a.svc != s && !a.a.Fired() && a.a.Err() == nil {
			moved = append(moved, a)
			r.following = slices.Delete(r.following, i, i+1)
			r.faults = slices.DeleteFunc(r.faults, func(x *armed) bool { return x == a })
			break
		}
	}
	r.mu.Unlock()
	if len(moved) == 0 {
		return nil
	}
	for _, a := range moved {
		if err := r.arm(name, s, a.f); err != nil {
			return err
		}
		r.mu.Lock()
		r.following = append(r.following, r.faults[len(r.faults)-1])
		r.mu.Unlock()
	}
	return r.follow(name, s) // the next one, if any
}
