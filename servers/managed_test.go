package servers_test

// The lifecycle of PostgreSQL beside a broker's server, as the runner
// runs them: Redis stands for any (broker/redisstream/redisserver).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker/redisstream/redisserver"
	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/servers"
)

// TestChildrenDieWithRunner SIGKILLs a runner (this test binary, re-executed)
// holding both servers and checks the kernel kills the servers too.
func TestChildrenDieWithRunner(t *testing.T) {
	if os.Getenv("SERVERS_TEST_RUNNER") == "1" {
		runAsRunner()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildrenDieWithRunner$")
	cmd.Env = append(os.Environ(), "SERVERS_TEST_RUNNER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	sc := bufio.NewScanner(out)
	for len(pids) < 2 && sc.Scan() {
		var pid int
		var dir string
		if n, _ := fmt.Sscanf(sc.Text(), "server %d %s", &pid, &dir); n == 2 {
			pids = append(pids, pid)
			t.Cleanup(func() { // a SIGKILLed runner cannot clean up
				os.RemoveAll(dir)
				if m := servers.LeasedDirName().FindStringSubmatch(filepath.Base(dir)); m != nil {
					os.Remove(filepath.Join(filepath.Dir(dir), "drill-run-"+m[2]+".lease"))
					os.Remove(filepath.Join(filepath.Dir(dir), servers.LeaseDirName(), "drill-run-"+m[2]+".lease"))
				}
			})
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if len(pids) != 2 {
		t.Fatalf("runner reported servers %v", pids)
	}
	for _, pid := range pids {
		deadline := time.Now().Add(5 * time.Second)
		for servers.Alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if servers.Alive(pid) {
			t.Errorf("server %d survived its runner", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	// Nobody removes the segment of a postmaster killed with its runner.
	pgUID := os.Geteuid()
	if cred, _ := servers.PostgresCredential(); cred != nil {
		pgUID = int(cred.Uid)
	}
	servers.RemoveSysvShm(pgUID, map[int]bool{pids[0]: true})
}

// runAsRunner starts both servers, reports them and waits to be killed.
func runAsRunner() {
	ctx := context.Background()
	pg, err := servers.StartPostgres(ctx, servers.PostgresOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("server %d %s\n", pg.PID(), pg.Dir)
	r, err := redisserver.Start(ctx, redisserver.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("server %d %s\n", r.PID(), r.Dir)
	time.Sleep(time.Minute)
}

func TestDiscardKillsAndRemoves(t *testing.T) {
	ctx := context.Background()
	pg, err := servers.StartPostgres(ctx, servers.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := redisserver.Start(ctx, redisserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		discard func(context.Context) error
		pid     int
		dir     string
	}{{pg.Discard, pg.PID(), pg.Dir}, {rd.Discard, rd.PID(), rd.Dir}} {
		if err := s.discard(ctx); err != nil {
			t.Errorf("discard: %v", err)
		}
		if syscall.Kill(s.pid, 0) == nil {
			t.Errorf("pid %d still runs", s.pid)
		}
		if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
			t.Errorf("%s still exists", s.dir)
		}
	}
}

// BenchmarkManaged starts PostgreSQL (warm cache) and Redis concurrently
// and discards them, as the runner does around a run on managed servers.
func BenchmarkManaged(b *testing.B) {
	ctx := testutil.ServerCtx(b)
	testutil.BenchStartDiscard(b, func() (testutil.Discarder, error) {
		var pg *servers.Postgres
		var pgErr error
		var wg sync.WaitGroup
		wg.Go(func() { pg, pgErr = servers.StartPostgres(ctx, servers.PostgresOptions{}) })
		r, err := redisserver.Start(ctx, redisserver.Options{})
		wg.Wait()
		if err = errors.Join(err, pgErr); err != nil {
			return nil, err
		}
		return both{pg, r}, nil
	})
}

type both [2]testutil.Discarder

func (s both) Discard(ctx context.Context) error {
	var wg sync.WaitGroup
	var errs [2]error
	for i, d := range s {
		wg.Go(func() { errs[i] = d.Discard(ctx) })
	}
	wg.Wait()
	return errors.Join(errs[:]...)
}
