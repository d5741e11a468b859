package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxdrill/runner/internal/testutil"
)

// TestMain lets the parallel tests run together: they mostly wait (a
// RabbitMQ node's boot, a ready timeout), and the serial ones before them
// are short.
func TestMain(m *testing.M) {
	testutil.DefaultParallel(4)
	os.Exit(m.Run())
}

func TestPostgres(t *testing.T) {
	ctx := testutil.ServerCtx(t)
	start := time.Now()
	pg, err := StartPostgres(ctx, PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started in %v at %s (pid %d, dir %s)", time.Since(start), pg.URL, pg.PID(), pg.Dir)
	pid, dir := pg.PID(), pg.Dir
	t.Cleanup(func() { pg.Stop(context.Background()) })
	testutil.AssertOwnGroup(t, pid)
	if os.Geteuid() == 0 {
		if fi, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err != nil || fi.Sys().(*syscall.Stat_t).Uid == 0 {
			t.Errorf("postmaster runs as root (stat: %v)", err)
		}
	}

	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	var fsync string
	if err := conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil || fsync != "on" {
		t.Errorf("fsync = %q, %v; want on", fsync, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE drill_test"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	cfg, err := pgx.ParseConfig(pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = "drill_test"
	db, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	_, err = db.Exec(ctx, "CREATE TABLE t AS SELECT generate_series(1, 10) AS i")
	if err == nil {
		err = db.QueryRow(ctx, "SELECT sum(i) FROM t").Scan(&n)
	}
	if err != nil || n != 55 {
		t.Errorf("sum = %d, %v; want 55", n, err)
	}
	db.Close(ctx) // a backend left open must not hold up a fast shutdown

	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.AssertGone(t, pid, dir)
	if err := pg.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestPostgresStopWithOpenConnection(t *testing.T) {
	ctx := testutil.ServerCtx(t)
	pg, err := StartPostgres(ctx, PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx) // fast shutdown aborts it instead of waiting
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	pid, dir := pg.PID(), pg.Dir
	start := time.Now()
	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped in %v", time.Since(start))
	testutil.AssertGone(t, pid, dir)
}

func TestMissingBinary(t *testing.T) {
	ctx := testutil.ServerCtx(t)
	cases := []struct {
		name    string
		start   func() error
		pkg     string
		address string
	}{
		{"postgres", func() error {
			_, err := StartPostgres(ctx, PostgresOptions{BinDir: t.TempDir()})
			return err
		}, `"postgresql"`, "RUNNER_PG_URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.start()
			var mb *MissingBinaryError
			if !errors.As(err, &mb) {
				t.Fatalf("got %v (%T), want *MissingBinaryError", err, err)
			}
			msg := err.Error()
			t.Log(msg)
			for _, want := range []string{tc.pkg, "apt-get install", tc.address} {
				if !strings.Contains(msg, want) {
					t.Errorf("message lacks %s: %s", want, msg)
				}
			}
		})
	}
}

// fakeBinDir makes a directory of shell scripts standing in for initdb and
// postgres, readable by the postgres user when we run as root.
func fakeBinDir(t *testing.T, scripts map[string]string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fake-pg-bin-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// privateTmp points TMPDIR at a fresh dir for this test, so checking that a
// failed start left nothing behind is not confused by other runs sharing
// /tmp. The postgres user must be able to enter it.
func privateTmp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "servers-test-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", dir)
	return dir
}

// assertCleanedUp checks that a failed start left no dir in tmp and no
// process running from it.
func assertCleanedUp(t *testing.T, tmp string) {
	t.Helper()
	if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
		t.Errorf("failed start left %s/%s behind", tmp, ents[0].Name())
	}
	if out, _ := exec.Command("pgrep", "-a", "-f", tmp).Output(); len(out) > 0 {
		t.Errorf("failed start left processes: %s", out)
	}
}

func TestPostgresStartFailureQuotesLogAndCleansUp(t *testing.T) {
	bin := fakeBinDir(t, map[string]string{
		"initdb":   "for i in $(seq 1 30); do echo chatter $i; done\necho 'initdb: error: boom' >&2\nexit 1\n",
		"postgres": "exit 0\n",
	})
	tmp := privateTmp(t)
	_, err := StartPostgres(testutil.ServerCtx(t), PostgresOptions{BinDir: bin})
	if err == nil {
		t.Fatal("start succeeded with a failing initdb")
	}
	t.Log(err)
	if msg := err.Error(); !strings.Contains(msg, "initdb: error: boom") || strings.Contains(msg, "chatter 10\n") {
		t.Errorf("error should quote only the log tail: %v", err)
	}
	assertCleanedUp(t, tmp)
}

func TestPostgresRetriesLostPort(t *testing.T) {
	bin := fakeBinDir(t, map[string]string{
		"initdb": "exit 0\n",
		"postgres": `echo x >> "$(dirname "$0")/attempts"
echo 'LOG:  could not bind IPv4 address "127.0.0.1": Address already in use' >&2
echo 'FATAL:  could not create any TCP/IP sockets' >&2
exit 1
`,
	})
	tmp := privateTmp(t)
	_, err := StartPostgres(testutil.ServerCtx(t), PostgresOptions{BinDir: bin})
	if err == nil || !strings.Contains(err.Error(), "Address already in use") {
		t.Fatalf("got %v, want a bind failure", err)
	}
	b, _ := os.ReadFile(filepath.Join(bin, "attempts"))
	if n := strings.Count(string(b), "x"); n != bindAttempts {
		t.Errorf("postgres started %d times, want %d", n, bindAttempts)
	}
	assertCleanedUp(t, tmp)
}

func TestCompareVersions(t *testing.T) {
	if compareVersions("15", "9.6") <= 0 || compareVersions("9.6", "9.5") <= 0 || compareVersions("16", "16") != 0 {
		t.Error("versions out of order")
	}
}

// BenchmarkStartPostgres measures a start from the cached initdb output
// (warm-cache) and with initdb (no-cache), and the Discard after it.
func BenchmarkStartPostgres(b *testing.B) {
	ctx := testutil.ServerCtx(b)
	if pg, err := StartPostgres(ctx, PostgresOptions{}); err == nil { // fills the cache
		pg.Discard(ctx)
	}
	for name, opts := range map[string]PostgresOptions{"warm-cache": {}, "no-cache": {NoCache: true}} {
		b.Run(name, func(b *testing.B) {
			testutil.BenchStartDiscard(b, func() (testutil.Discarder, error) { return StartPostgres(ctx, opts) })
		})
	}
}

// TestLostPortRaceDetected checks the real server's bind failure is
// recognised, so start retries it on a new port (the brokers' servers
// check theirs beside them: broker/X/Xserver).
func TestLostPortRaceDetected(t *testing.T) {
	ctx := testutil.ServerCtx(t)
	t.Run("postgres", func(t *testing.T) {
		var echo testutil.SyncBuffer
		pg, err := StartPostgres(ctx, PostgresOptions{Log: &echo})
		if err != nil {
			t.Fatal(err)
		}
		defer pg.Stop(ctx)
		// A second postmaster on the same cluster would trip over the lock
		// file, so stop ours first and then try to launch it on a busy port.
		if err := pg.Halt(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := pg.launch(ctx, testutil.Occupy(t)); !LostPortRace(err) {
			t.Fatalf("launch on a busy port: %v; want a lost port race", err)
		}
		if !strings.Contains(echo.String(), "Address already in use") {
			t.Errorf("PostgresOptions.Log did not get the server output: %q", echo.String())
		}
	})
}

// alive reports whether pid exists and is not a zombie (a container's init
// may never reap orphans).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestStartCancelledCleansUp cancels StartPostgres mid-initdb, as a Ctrl-C
// during start does, and checks nothing is left behind.
func TestStartCancelledCleansUp(t *testing.T) {
	tmp := privateTmp(t)
	shm := shmSegments(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	pg, err := StartPostgres(ctx, PostgresOptions{})
	if err == nil {
		pg.Stop(context.Background())
		t.Skip("start finished before the cancel")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want a context error", err)
	}
	assertCleanedUp(t, tmp)
	assertNoOrphanedShm(t, shm)
}

// shmSegment is one line of /proc/sysvipc/shm.
type shmSegment struct{ id, cpid, nattch int }

func shmSegments(t *testing.T) []shmSegment {
	t.Helper()
	b, err := os.ReadFile("/proc/sysvipc/shm")
	if err != nil {
		t.Skip(err)
	}
	var segs []shmSegment
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// key shmid perms size cpid lpid nattch ...
		if f := strings.Fields(line); len(f) > 6 {
			id, _ := strconv.Atoi(f[1])
			cpid, _ := strconv.Atoi(f[4])
			nattch, _ := strconv.Atoi(f[6])
			segs = append(segs, shmSegment{id, cpid, nattch})
		}
	}
	return segs
}

// assertNoOrphanedShm checks that no SysV segment is left, beyond those in
// before, that nobody is attached to and whose creator is dead, i.e. that
// nobody will ever remove.
func assertNoOrphanedShm(t *testing.T, before []shmSegment) {
	t.Helper()
	var orphans []shmSegment
	ok := testutil.Eventually(func() bool {
		orphans = orphans[:0]
		for _, s := range shmSegments(t) {
			if s.nattch == 0 && !alive(s.cpid) && !slices.Contains(before, s) {
				orphans = append(orphans, s)
			}
		}
		return len(orphans) == 0
	})
	if !ok {
		t.Errorf("orphaned SysV shared memory segments: %+v", orphans)
	}
}

// TestKilledPostmasterLeavesNoSharedMemory kills the postmaster outright, as
// Stop's fallback does, and checks its SysV segment does not outlive it.
func TestKilledPostmasterLeavesNoSharedMemory(t *testing.T) {
	pg, err := StartPostgres(testutil.ServerCtx(t), PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid, dir := pg.PID(), pg.Dir
	if err := pg.Discard(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.AssertGone(t, pid, dir)
	ok := testutil.Eventually(func() bool {
		return !slices.ContainsFunc(shmSegments(t), func(s shmSegment) bool { return s.cpid == pid })
	})
	if !ok {
		t.Errorf("the killed postmaster's SysV segment outlived it")
	}
}

func TestPostgresFromCachedDataDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	ctx := context.Background()
	for i, want := range []string{"initdb, then cached", "copied from the cache"} {
		pg, err := StartPostgres(ctx, PostgresOptions{})
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		conn, err := pgx.Connect(ctx, pg.URL)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname IN ('postgres','template0','template1')").Scan(&n); err != nil || n != 3 {
			t.Errorf("%s: %d base databases, %v", want, n, err)
		}
		conn.Close(ctx)
		pg.Stop(ctx)
		matches, _ := filepath.Glob(filepath.Join(os.Getenv("XDG_CACHE_HOME"), "outboxdrill", "*"))
		if len(matches) != 1 || !strings.HasSuffix(matches[0], ".tar") {
			t.Fatalf("%s: want one cached data dir (a tar file), got %v", want, matches)
		}
	}
}

// TestPostgresKillKeepsCommits kills a server with a committed row and an
// open backend, and checks no process of it survives, its dynamic shared
// memory lived in its data dir, and Start recovers the row.
func TestPostgresKillKeepsCommits(t *testing.T) {
	ctx := testutil.ServerCtx(t)
	pg, err := StartPostgres(ctx, PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Discard(context.Background()) })
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var dsm string
	if err := conn.QueryRow(ctx, "SHOW dynamic_shared_memory_type").Scan(&dsm); err != nil || dsm != "mmap" {
		t.Errorf("dynamic_shared_memory_type = %q, %v; want mmap (segments in the data dir)", dsm, err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t AS SELECT 42 AS i"); err != nil {
		t.Fatal(err)
	}
	pid := pg.PID()
	kids := childrenOf(pid)
	if len(kids) == 0 {
		t.Fatal("postmaster has no children")
	}
	if err := pg.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range append(kids, pid) {
		if running(k) {
			t.Errorf("process %d of the killed server still runs", k)
		}
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn2, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close(context.Background())
	var i int
	if err := conn2.QueryRow(ctx, "SELECT i FROM t").Scan(&i); err != nil || i != 42 {
		t.Errorf("after Kill and Start: %d, %v; want the committed 42", i, err)
	}
}

func TestTempRoot(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	if got := TempRoot(); got != dir {
		t.Errorf("with TMPDIR=%s: TempRoot() = %s", dir, got)
	}
	t.Setenv("TMPDIR", "")
	var st syscall.Statfs_t
	if syscall.Statfs(shmDir, &st) != nil || st.Bavail*uint64(st.Bsize) < minShmFree {
		t.Skipf("%s absent or small", shmDir)
	}
	if got := TempRoot(); got != shmDir {
		t.Errorf("without TMPDIR: TempRoot() = %s; want %s", got, shmDir)
	}
}

// TestPidFileReady checks the postmaster.pid status is read from the right
// line, that a file a killed server left behind, saying "ready", does not
// count for the new postmaster, and that the port must be ours.
func TestPidFileReady(t *testing.T) {
	dir := t.TempDir()
	p := &Postgres{dataDir: dir}
	c := &Child{cmd: exec.Command("true")}
	c.cmd.Process = &os.Process{Pid: 4242}
	for _, tc := range []struct {
		pid, port, status string
		ready             bool
	}{{"4242", "5432", "ready   ", true}, {"4242", "5432", "starting", false}, {"4141", "5432", "ready   ", false}, {"4242", "5433", "ready   ", false}} {
		pidFile := tc.pid + "\n" + dir + "\n1796424890\n" + tc.port + "\n/tmp\n127.0.0.1\n  1547820    327712\n" + tc.status + "\n"
		if err := os.WriteFile(filepath.Join(dir, "postmaster.pid"), []byte(pidFile), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := p.pidFileReady(c, 5432); (err == nil) != tc.ready {
			t.Errorf("pid %s, port %s, status %q: got %v, want ready %v", tc.pid, tc.port, tc.status, err, tc.ready)
		}
	}
}

// TestAStopDuringARelaunchEndsIt: a Stop that lands while PostgreSQL is
// being started again must stop what that start brought up. The kill of a
// PostgreSQL asks whether the server ended while launchOn holds the
// lifecycle's lock: it once took that lock again and hung for good.
func TestAStopDuringARelaunchEndsIt(t *testing.T) {
	ctx := testutil.ServerCtx(t)
	pg, err := StartPostgres(ctx, PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Discard(context.Background())
	if err := pg.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	pg.mu.Lock()
	pg.ended.Store(true) // as Stop does, between the relaunch's start and its end
	pg.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- pg.launchOn(ctx, pg.ports) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "stopped while starting") {
			t.Errorf("launchOn after Stop: %v, want stopped while starting", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("launchOn hung: the kill waited for the lock its caller holds")
	}
	if pid := pg.PID(); pid != 0 {
		t.Errorf("the relaunched server runs (pid %d) after the Stop", pid)
	}
}

func TestNATSLostPortDetected(t *testing.T) {
	// The real log line of nats-server 2.9 when the port is taken.
	se := &startError{what: "nats-server exited while starting", output: `[FTL] Error listening on port: 127.0.0.1:4222, "listen tcp 127.0.0.1:4222: bind: address already in use"`}
	if !LostPortRace(se) {
		t.Error("bind failure not recognised")
	}
	if LostPortRace(&startError{output: "[FTL] bad flag"}) || LostPortRace(errors.New("address already in use")) {
		t.Error("other failures taken for a lost port")
	}
}

func TestRabbitMQLostPortDetected(t *testing.T) {
	for _, out := range []string{
		"epmd: there is already a epmd running at port 4369 on ipaddr 127.0.0.1",
		"{error,{listen_error,eaddrinuse}}",
	} {
		if !LostPortRace(&startError{output: out}) {
			t.Errorf("%q not recognised", out)
		}
	}
	if LostPortRace(&startError{output: "BOOT FAILED"}) || LostPortRace(errors.New("eaddrinuse")) {
		t.Error("other failures taken for a lost port")
	}
}
