package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/scenario"
)

func TestMain(m *testing.M) {
	if os.Getenv(asRunnerEnv) == "1" {
		main() // runnerBin's script: this binary is the runner
		return
	}
	testservers.Parallel(8)
	testservers.Main(m)
}

// envMu serializes setProcessEnv's check-then-set.
var envMu sync.Mutex

// setProcessEnv sets key to value for the whole test binary, not for one
// test (t.Setenv forbids t.Parallel). Only for values every test shares
// (the test servers' URLs, the built binaries): a parallel test may run
// beside any other and sees them all. A serial test may still t.Setenv
// one of them to something else: Go starts the parallel top-level tests
// only after every serial one ended (and restored what it set).
func setProcessEnv(t testing.TB, key, value string) {
	t.Helper()
	envMu.Lock()
	defer envMu.Unlock()
	if os.Getenv(key) != value {
		if err := os.Setenv(key, value); err != nil {
			t.Fatal(err)
		}
	}
}

// cli runs Main in-process on the test servers: RUNNER_PG_URL and
// RUNNER_REDIS_URL are theirs, set each time (a serial test's t.Setenv
// of them ends with that test).
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	pg, rd := testservers.URLs(t)
	setProcessEnv(t, "RUNNER_PG_URL", pg)
	setProcessEnv(t, "RUNNER_REDIS_URL", rd)
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// cliEnv runs the built runner as a process on the test servers, env
// (KEY=value) added to its environment: what a team's services get from
// the runner's environment (BUG=ack-first runner run …) differs per run,
// and in-process runs would share one environment.
func cliEnv(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	bin := runnerBin(t)
	pg, rd := testservers.URLs(t)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "RUNNER_PG_URL="+pg, "RUNNER_REDIS_URL="+rd, "RUNNER_BIN="+bin)
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		t.Fatalf("runner %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

func scenarioFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// withinCut copies a scenario file, or a directory's scenarios (its tree,
// .yaml and .yml, as the runner finds them), into a temp dir with the
// within: a planted bug fails cut to d, and returns the copy. Such a run
// fails by waiting out that within:, and what the test checks is the
// verdict after it, which the runner reads only once the system has
// settled. Cut are the within: from the first step that arms a fault on,
// or in a scenario with no fault the last one: the expects before a fault
// are what the buggy service passes like the correct one, and keep their
// margin. The scenarios must not name a file relative to themselves
// (system: …): these runs give --system.
func withinCut(t *testing.T, path string, d time.Duration) string {
	t.Helper()
	dir := t.TempDir()
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		dst := filepath.Join(dir, filepath.Base(path))
		writeCut(t, path, dst, d)
		return dst
	}
	n := 0
	err := filepath.WalkDir(path, func(src string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(src, ".yaml") && !strings.HasSuffix(src, ".yml") {
			return err
		}
		rel, _ := filepath.Rel(path, src)
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		writeCut(t, src, dst, d)
		n++
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("%s: no scenarios (%v)", path, err)
	}
	return dir
}

// writeCut writes src to dst with the within: withinCut cuts cut to d.
func writeCut(t *testing.T, src, dst string, d time.Duration) {
	t.Helper()
	body := mustRead(t, src)
	// A system: key is relative to the file: the copy names it absolute.
	body = systemLine.ReplaceAllStringFunc(body, func(m string) string {
		rel := strings.TrimSpace(strings.TrimPrefix(m, "system:"))
		if filepath.IsAbs(rel) {
			return m
		}
		return "system: " + mustAbs(t, filepath.Join(filepath.Dir(src), rel))
	})
	lines := strings.Split(body, "\n")
	from := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "fault:") })
	if from < 0 {
		from = len(lines) - 1
		for from > 0 && !withinRE.MatchString(lines[from]) {
			from--
		}
	}
	for i := max(from, 0); i < len(lines); i++ {
		lines[i] = withinRE.ReplaceAllStringFunc(lines[i], func(m string) string {
			if v, err := time.ParseDuration(strings.TrimPrefix(m, "within: ")); err == nil && v > d {
				return "within: " + d.String()
			}
			return m
		})
	}
	if err := os.WriteFile(dst, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

var (
	withinRE   = regexp.MustCompile(`within: [0-9]+(ms|s|m)\b`)
	systemLine = regexp.MustCompile(`(?m)^system: *[^ #\n]+`)
)

// The relay-crash example from the language contract, verbatim.
const contractExample = `name: relay crashes after XADD, before marking the outbox row
tags: [seed, outbox]
steps:
  - produce: {event: bus-1, amount: 100}
  - relay(skip_mark)
  - expect: {stream.entries: 1, outbox.unpublished: 1}
  - relay
  - expect: {stream.entries: 2, stream.events: 1, outbox.unpublished: 0}
  - consume: {consumer: accounting}
    expect: {applied: 1, duplicate: 1}
  - expect:
      inbox.rows: {accounting: 1}
      projection: {accounting: {USD: {amount: 100, events: 1}}}
`

func TestRunPassExitsZero(t *testing.T) {
	f := scenarioFile(t, "ok.yaml", contractExample)
	code, out, errs := cli(t, "run", f)
	if code != 0 || !strings.Contains(out, "--- PASS: relay crashes") || !strings.Contains(out, "ok: 1 passed, 0 failed") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
}

func TestRunWrongExpectationExitsOne(t *testing.T) {
	f := scenarioFile(t, "wrong.yaml", strings.Replace(contractExample, "amount: 100, events: 1", "amount: 200, events: 1", 1))
	code, out, _ := cli(t, "run", f)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{
		"--- FAIL: relay crashes",
		f + ":13:7: projection:\n",
		"want {accounting: {USD: {amount: 200, events: 1}}}",
		" got {accounting: {USD: {amount: 100, events: 1}}}",
		"(-want +got)\n        - accounting.USD.amount: 200\n        + accounting.USD.amount: 100\n",
		"FAIL: 0 passed, 1 failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestInvalidFileExitsTwoAndRunsNothing(t *testing.T) {
	f := scenarioFile(t, "bad.yaml", "name: bad\nsteps:\n  - produce(amout=5)\n  - relya\n  - expect: {outbox.rows: many}\n")
	for _, cmd := range []string{"run", "validate"} {
		code, out, errs := cli(t, cmd, f)
		if code != 2 || out != "" && cmd == "run" {
			t.Errorf("%s: exit %d, want 2; stdout %q", cmd, code, out)
		}
		for _, want := range []string{
			f + `:3:13: unknown parameter "amout" (did you mean "amount"?)`,
			f + `:4:5: unknown step "relya" (did you mean "relay"?)`,
			f + `:5:27: outbox.rows: want an integer, got "many"`,
			"3 problem(s) in 1 file(s); nothing was run",
		} {
			if !strings.Contains(errs, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", cmd, want, errs)
			}
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rnu"}, `unknown command "rnu" (did you mean "run"?)`},
		{[]string{"run", "--nope"}, "flag provided but not defined: -nope"},
		{[]string{"run", "--run", "(", "."}, "--run: error parsing regexp"},
		{[]string{"run", "/does/not/exist"}, "no such file or directory"},
		{nil, "usage: runner <command>"},
	} {
		code, _, errs := cli(t, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

func TestRunFilterAndFlagsAfterPaths(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("name: alpha\nsteps: [produce]\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("name: beta\nsteps: [produce]\n"), 0o644)
	code, out, _ := cli(t, "run", dir, "--run", "^al", "-v")
	if code != 0 || !strings.Contains(out, "PASS: alpha") || strings.Contains(out, "beta") || !strings.Contains(out, "produce → committed=1") {
		t.Fatalf("exit %d\n%s", code, out)
	}
}

// The docs and schema commands print what the registries generate (the
// files in docs/ are kept equal to it by the runner package's golden tests).
func TestDocsAndSchemaCommands(t *testing.T) {
	if code, out, _ := cli(t, "docs"); code != 0 || out != scenario.Reference() {
		t.Errorf("runner docs: exit %d, output differs from scenario.Reference()", code)
	}
	if code, out, _ := cli(t, "schema"); code != 0 || out != string(scenario.Schema()) {
		t.Errorf("runner schema: exit %d, output differs from scenario.Schema()", code)
	}
}

// TestInterruptCleansUp sends Ctrl-C (SIGINT) to a real runner process with
// managed servers — while it prepares the templates, while it isolates a
// scenario, and in the middle of a step — and checks that it exits 130 and
// leaves no server process and no temp dir behind. SIGTERM (a CI job
// cancelled, docker stop) does the same and exits 143.
func TestInterruptCleansUp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts its own servers")
	}
	bin := buildRunner(t)
	f := scenarioFile(t, "hang.yaml", "name: hang\nsteps:\n  - produce\n  - consume(block=1m)\n")
	// Each run starts servers of its own: they wait on the servers
	// booting, not on each other.
	for _, delay := range []time.Duration{0, 150 * time.Millisecond, 1500 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) { t.Parallel(); interruptManaged(t, bin, f, delay, syscall.SIGINT) })
	}
	for _, delay := range []time.Duration{150 * time.Millisecond, 1500 * time.Millisecond} {
		t.Run("SIGTERM/"+delay.String(), func(t *testing.T) { t.Parallel(); interruptManaged(t, bin, f, delay, syscall.SIGTERM) })
	}
}

func interruptManaged(t *testing.T, bin, f string, delay time.Duration, sig syscall.Signal) {
	cmd := exec.Command(bin, "run", "-v", f)
	cmd.Env = append(os.Environ(), "RUNNER_PG_URL=", "RUNNER_REDIS_URL=")
	var stderr, stdout testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := regexp.MustCompile(`started (PostgreSQL \([a-z ]+\)|Redis) pid (\d+) on port \d+ in (\S+)`)
	deadline := time.Now().Add(60 * time.Second)
	const servers = 2 // PostgreSQL for both sides (no scenario crashes one), Redis
	for len(started.FindAllString(stderr.String(), -1)) < servers && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(delay) // 1.5s reaches the blocking consume
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	want := map[syscall.Signal]int{syscall.SIGINT: 130, syscall.SIGTERM: 143}[sig]
	if code := cmd.ProcessState.ExitCode(); code != want {
		t.Fatalf("exit %d (%v), want %d\nstdout:\n%s\nstderr:\n%s", code, err, want, stdout.String(), stderr.String())
	}
	ms := started.FindAllStringSubmatch(stderr.String(), -1)
	if len(ms) != servers {
		t.Fatalf("want %d managed servers in the log:\n%s", servers, stderr.String())
	}
	for _, m := range ms {
		var pid int
		_, _ = fmt.Sscan(m[2], &pid)
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("%s pid %d still runs after %v", m[1], pid, sig)
		}
		if _, err := os.Stat(m[3]); !os.IsNotExist(err) {
			t.Errorf("%s dir %s still exists after %v", m[1], m[3], sig)
		}
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr does not say it was interrupted:\n%s", stderr.String())
	}
}

// TestInterruptDropsDatabasesOnExternalServers checks the same with --pg and
// --redis: the run's databases and stream are gone after Ctrl-C.
func TestInterruptDropsDatabasesOnExternalServers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildRunner(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testservers.PG(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	f := scenarioFile(t, "hang.yaml", "name: hang\nsteps:\n  - produce\n  - consume(block=1m)\n")
	cmd := exec.Command(bin, "run", "--pg", testservers.PG(t), "--redis", testservers.Redis(t), f)
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var run string
	for deadline := time.Now().Add(30 * time.Second); run == "" && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		_ = conn.QueryRow(ctx, `SELECT substring(datname from '^drill_([0-9a-f]+)_1_c$') FROM pg_database WHERE datname ~ '^drill_[0-9a-f]+_1_c$'`).Scan(&run)
	}
	if run == "" {
		t.Fatalf("the scenario's databases never appeared:\n%s", out.String())
	}
	time.Sleep(300 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d, want 130:\n%s", code, out.String())
	}
	// The scenario cut off is not judged: no failure of the system drilled
	// (a Ctrl-C read "1 failed", and a JUnit failure).
	if strings.Contains(out.String(), " 1 failed") || !strings.Contains(out.String(), "interrupted (SIGINT or SIGTERM) while it ran: not judged") || !strings.Contains(out.String(), "INCOMPLETE: 0 passed, 0 failed, 1 skipped") {
		t.Errorf("the interrupted scenario is reported as failed, or not as interrupted:\n%s", out.String())
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname LIKE $1`, "drill_"+run+"%").Scan(&n); err != nil || n != 0 {
		t.Errorf("%d databases of run %s left after Ctrl-C (%v)", n, run, err)
	}
}

// buildRunner builds the runner binary for tests that need a real process.
// buildRunner is the runner binary, built once per test binary (runnerBin):
// the tests that run it as a process only read it.
func buildRunner(t *testing.T) string {
	t.Helper()
	return runnerBin(t)
}

func TestKeepThenClean(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testservers.PG(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("name: passes\nsteps: [produce, relay]\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("name: fails\nsteps:\n  - produce\n  - relay\n  - expect: {stream.entries: 2}\n"), 0o644)
	code, out, _ := cli(t, "run", "--keep", "failed", "--parallel", "1", dir)
	if code != 1 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	m := regexp.MustCompile(`kept producer DB: psql '(postgres://[^']*/(drill_[0-9a-f]{8}_\d+_p))'`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "kept stream:      redis-cli") || strings.Count(out, "kept producer DB") != 1 {
		t.Fatalf("want one kept scenario with inspect commands:\n%s", out)
	}
	var n int
	_ = conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, m[2]).Scan(&n)
	if n != 1 {
		t.Fatalf("kept database %s is gone", m[2])
	}
	// The printed psql URL really reaches the kept database and its rows.
	kept, err := pgx.Connect(ctx, m[1]+"?sslmode=disable")
	if err != nil {
		t.Fatalf("kept database unreachable at the printed URL: %v", err)
	}
	_ = kept.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n)
	kept.Close(ctx)
	if n != 1 {
		t.Errorf("kept outbox has %d rows, want 1", n)
	}

	// Someone else's database, and one of ours still in use: clean leaves both.
	conn.Exec(ctx, `CREATE DATABASE drill_bystander`)
	defer conn.Exec(ctx, `DROP DATABASE IF EXISTS drill_bystander`)
	conn.Exec(ctx, `CREATE DATABASE drill_0badcafe_1_c`)
	defer conn.Exec(ctx, `DROP DATABASE IF EXISTS drill_0badcafe_1_c WITH (FORCE)`)
	cfg, _ := pgx.ParseConfig(testservers.PG(t))
	cfg.Database = "drill_0badcafe_1_c"
	busy, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close(ctx)

	code, out, errs := cli(t, "clean")
	if code != 0 || !strings.Contains(out, "removed "+m[2]) || !strings.Contains(out, "in use, left alone: drill_0badcafe_1_c") {
		t.Fatalf("clean: exit %d\n%s\n%s", code, out, errs)
	}
	_ = conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname IN ($1, 'drill_bystander')`, m[2]).Scan(&n)
	if n != 1 {
		t.Errorf("after clean: want only drill_bystander left of the two, got %d", n)
	}
}

func TestKeepNeedsExternalServers(t *testing.T) {
	f := scenarioFile(t, "a.yaml", "name: a\nsteps: [produce]\n")
	var out, errb bytes.Buffer
	t.Setenv("RUNNER_PG_URL", "")
	t.Setenv("RUNNER_REDIS_URL", "")
	if code := Main(context.Background(), []string{"run", "--keep", "all", f}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--keep needs --pg and the URL of each broker") {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	t.Setenv("RUNNER_NATS_URL", "")
	errb.Reset()
	if code := Main(context.Background(), []string{"run", "--keep", "all", "--broker", "redis,nats", "--pg", "postgres://u@127.0.0.1:1/db", "--redis", "redis://127.0.0.1:1", f}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--keep needs") {
		t.Fatalf("--keep with the runner's own NATS: exit %d: %s", code, errb.String())
	}
	if code := Main(context.Background(), []string{"run", "--keep", "some", "--pg", "postgres://u@127.0.0.1:1/db", "--redis", "redis://127.0.0.1:1", f}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--keep wants failed or all") {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}

// TestCIExampleWorkflow keeps the GitHub Actions example honest: valid YAML
// whose shard runs use flags the runner really has.
func TestCIExampleWorkflow(t *testing.T) {
	b, err := os.ReadFile("../../docs/ci/github-actions.yml")
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Steps []struct{ Run string }
		}
	}
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatalf("not YAML: %v", err)
	}
	var run string
	for _, st := range wf.Jobs["drills"].Steps {
		if strings.Contains(st.Run, "cmd/runner run") {
			run = st.Run
		}
	}
	for _, flag := range []string{"--shard", "--junit", "--markdown"} {
		if !strings.Contains(run, flag) {
			t.Errorf("the workflow's run step lacks %s", flag)
		}
	}
	f := scenarioFile(t, "a.yaml", "name: a\nsteps: [produce]\n")
	if code, _, errs := cli(t, "validate", f); code != 0 {
		t.Fatal(errs)
	}
	// The same flags parse (an empty shard is fine and runs nothing).
	dir := t.TempDir()
	code, out, errs := cli(t, "run", f, "--shard", "4/4", "--junit", filepath.Join(dir, "r.xml"), "--markdown", filepath.Join(dir, "r.md"))
	if code != 0 && code != 1 {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
}

func TestShardWithAWrongSelectionIsAnError(t *testing.T) {
	f := scenarioFile(t, "a.yaml", "name: a\ntags: [x]\nsteps: [produce]\n")
	if code, _, errs := cli(t, "run", "--shard", "1/2", "--tags", "tpyo", f); code != 2 || !strings.Contains(errs, "no scenario matches the selection") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// An empty shard of a right selection is fine.
	var empty int
	for k := 1; k <= 3; k++ {
		code, out, _ := cli(t, "run", "--shard", fmt.Sprintf("%d/3", k), "--tags", "x", f)
		if code != 0 {
			t.Fatalf("shard %d/3: exit %d", k, code)
		}
		if strings.Contains(out, "holds no scenario") {
			empty++
		}
	}
	if empty != 2 {
		t.Errorf("want two empty shards of three for one scenario, got %d", empty)
	}
}

func TestReportPathsAreCheckedBeforeRunning(t *testing.T) {
	f := scenarioFile(t, "a.yaml", "name: a\nsteps: [produce]\n")
	code, out, errs := cli(t, "run", "--junit", "/nonexistent/dir/r.xml", f)
	if code != 2 || strings.Contains(out, "PASS") || strings.Count(errs, "/nonexistent/dir/r.xml") != 1 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestUnknownBrokerIsUsageError(t *testing.T) {
	f := scenarioFile(t, "a.yaml", "name: a\nsteps: [produce]\n")
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"run", "--broker", "redis,nast", f}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), `unknown broker "nast" (did you mean "nats"?)`) {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}

// run0 runs Main without servers: for usage and help, which need none.
func run0(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestEveryCommandHasHelp(t *testing.T) {
	for name := range commands {
		if help[name].summary == "" {
			t.Errorf("command %s has no one-line description in help", name)
		}
	}
	for name := range help {
		if _, ok := commands[name]; !ok && name != "help" {
			t.Errorf("help describes %s, which is no command", name)
		}
	}
	for _, name := range commandNames() {
		for _, args := range [][]string{{name, "--help"}, {name, "-h"}, {"help", name}} {
			code, out, errs := run0(args...)
			want := "usage: runner " + name + " "
			if code != 0 || !strings.HasPrefix(out, want) || !strings.Contains(out, help[name].summary) || errs != "" {
				t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and stdout starting %q", args, code, out, errs, want)
			}
		}
	}
	// Flags are listed: run's, and soak's.
	if _, out, _ := run0("help", "run"); !strings.Contains(out, "-broker") || !strings.Contains(out, "-timeout") {
		t.Errorf("help run lists no flags:\n%s", out)
	}
}

func TestTopLevelUsage(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		code, out, errs := run0(args...)
		if code != 0 || errs != "" || !strings.HasPrefix(out, "usage: runner <command>") {
			t.Errorf("%v: exit %d, stderr %q, stdout %q", args, code, errs, out)
		}
		for _, name := range commandNames() {
			if !regexp.MustCompile(`(?m)^  ` + name + ` +` + regexp.QuoteMeta(help[name].summary) + `$`).MatchString(out) {
				t.Errorf("%v: usage lacks %s and its description:\n%s", args, name, out)
			}
		}
	}
	// No command at all is a usage error: usage on stderr, exit 2.
	if code, out, errs := run0(); code != 2 || out != "" || !strings.HasPrefix(errs, "usage: runner <command>") {
		t.Errorf("no args: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestHelpUnknownCommand(t *testing.T) {
	code, out, errs := run0("help", "rnu")
	if code != 2 || out != "" || !strings.Contains(errs, `runner help: unknown command "rnu" (did you mean "run"?)`) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := run0("help", "run", "list"); code != 2 || !strings.Contains(errs, "usage: runner help [command]") {
		t.Errorf("help with two commands: exit %d, stderr %q", code, errs)
	}
}

// TestHeaderCommentIsComplete: main.go's doc comment names every command
// and every broker.
func TestHeaderCommentIsComplete(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := strings.Cut(string(src), "package main")
	for _, name := range commandNames() {
		if !strings.Contains(header, "//\trunner "+name+" ") {
			t.Errorf("main.go's header comment lacks the %s command", name)
		}
	}
	for _, b := range broker.Names() {
		if !strings.Contains(header, b) {
			t.Errorf("main.go's header comment lacks the %s broker", b)
		}
	}
}

func TestBadFlagValuesAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--timeout", "soon"}, `runner run: --timeout "soon": want a duration > 0 such as 30s, 2m or 1h30m`},
		{[]string{"run", "--parallel", "two"}, `runner run: --parallel "two": want a whole number`},
		{[]string{"run", "-v=maybe"}, `runner run: -v "maybe": want true or false`},
		{[]string{"soak", "--seed", "-1"}, `runner soak: --seed "-1": want a whole number, 0 or more`},
		{[]string{"soak", "--faults", "lots"}, `runner soak: --faults "lots": want a number from 0 to 1 such as 0.1`},
		{[]string{"bench", "--repeat", "3x"}, `runner bench: --repeat "3x": want a whole number`},
		{[]string{"list", "--tgas", "x"}, `runner list: flag provided but not defined: -tgas (did you mean "tags"?)`},
		{[]string{"run", "--timeout"}, `runner run: flag needs an argument: -timeout`},
		{[]string{"docs", "extra"}, `runner docs: unexpected argument "extra"`},
		{[]string{"clean", "extra"}, `runner clean: unexpected argument "extra"`},
	} {
		code, out, errs := run0(tc.args...)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, out, errs, tc.want)
		}
	}
}

// TestSyntaxErrorExitsTwo: a file that is not valid YAML is an invalid
// scenario, reported at the offending token.
func TestSyntaxErrorExitsTwo(t *testing.T) {
	f := scenarioFile(t, "tab.yaml", "name: x\nsteps:\n  - produce\n\t- relay\n")
	for _, cmd := range []string{"validate", "run", "list"} {
		code, out, errs := run0(cmd, f)
		if code != 2 || strings.Contains(out, "PASS") || !strings.Contains(errs, f+":4:1: a tab in indentation; YAML indents with spaces") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", cmd, code, out, errs)
		}
	}
}

// TestFIFOIsAnErrorAtOnce: validate and run on a FIFO used to block forever
// in the read; now they name the file and what it is, exit 2, at once.
func TestFIFOIsAnErrorAtOnce(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no mkfifo:", err)
	}
	for _, cmd := range []string{"validate", "run", "list"} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			code, _, errs := run0(cmd, fifo)
			if code != 2 || !strings.Contains(errs, fifo+" is not a regular file (a FIFO)\n") {
				t.Errorf("%s: exit %d, stderr %q", cmd, code, errs)
			}
		}()
		select {
		case <-done:
		case <-time.After(time.Second):
			t.Fatalf("%s on a FIFO still blocks", cmd)
		}
	}
}

// TestNumericFlagsAreChecked: every count and duration of every command is
// checked when parsed, exit 2 with what is wanted; nothing runs (run0 has
// no servers, and the messages come before any load).
func TestNumericFlagsAreChecked(t *testing.T) {
	const (
		dur   = "want a duration > 0 such as 30s, 2m or 1h30m"
		count = "want a whole number, 1 or more"
	)
	for _, tc := range []struct {
		cmd, flag string
		bad       []string
		want      string
	}{
		{"run", "timeout", []string{"0", "-1s", "0s"}, dur},
		{"run", "parallel", []string{"0", "-5"}, count},
		{"soak", "events", []string{"0", "-1"}, count},
		{"soak", "faults", []string{"-0.1", "1.5", "NaN"}, "want a number from 0 to 1 such as 0.1"},
		{"soak", "parallel", []string{"0", "-2"}, count},
		{"soak", "batch", []string{"0", "-1"}, count},
		{"bench", "soak-events", []string{"-1"}, "want a whole number, 0 or more"},
		{"bench", "repeat", []string{"0", "-3"}, count},
		{"run", "connect-timeout", []string{"0", "-1s"}, dur},
		{"soak", "connect-timeout", []string{"0"}, dur},
		{"bench", "connect-timeout", []string{"0"}, dur},
		{"clean", "connect-timeout", []string{"-5s"}, dur},
	} {
		for _, v := range tc.bad {
			for _, args := range [][]string{{tc.cmd, "--" + tc.flag, v}, {tc.cmd, "--" + tc.flag + "=" + v}} {
				code, out, errs := run0(args...)
				want := fmt.Sprintf("runner %s: --%s %q: %s\n", tc.cmd, tc.flag, v, tc.want)
				if code != 2 || out != "" || !strings.HasPrefix(errs, want) {
					t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", args, code, out, errs, want)
				}
			}
		}
	}
	// The edges are accepted: help still parses with them.
	for _, args := range [][]string{
		{"run", "--timeout", "1ns", "--parallel", "1", "-h"},
		{"soak", "--faults", "0", "--faults", "1", "--batch", "1", "--events", "1", "-h"},
		{"bench", "--soak-events", "0", "--repeat", "1", "-h"},
	} {
		if code, _, errs := run0(args...); code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, errs)
		}
	}
	// Help shows each flag's type and default as before.
	if _, out, _ := run0("help", "run"); !strings.Contains(out, "-timeout DURATION") || !strings.Contains(out, "(default 1m0s)") || strings.Contains(out, "panic") {
		t.Errorf("help run:\n%s", out)
	}
}

// TestConnectTimeout: --pg or --redis at a port that says nothing, or
// something else, is exit 3 within --connect-timeout (it hung ~120 s),
// naming the address and what answered; for run, soak and clean.
func TestConnectTimeout(t *testing.T) {
	t.Parallel()
	silent, garbage := testutil.Listener(t, hello(nil)), testutil.Listener(t, hello([]byte("garbage\r\n")))
	f := scenarioFile(t, "a.yaml", "name: a\nsteps: [produce]\n")
	noAnswer := " gave no answer within 1s; is a PostgreSQL server there?"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--connect-timeout", "1s", "--pg", "postgres://u:pw@" + silent + "/db", f}, silent + noAnswer},
		{[]string{"run", "--connect-timeout", "1s", "--pg", "postgres://u:pw@" + garbage + "/db", f}, garbage + ` does not speak the PostgreSQL protocol: it answered "garbage\r\n"`},
		{[]string{"run", "--connect-timeout", "1s", "--redis", "redis://" + silent, f}, silent + " gave no answer within 1s; is a Redis server there?"},
		{[]string{"soak", "--connect-timeout", "1s", "--events", "1", "--pg", "postgres://u:pw@" + silent + "/db"}, silent + noAnswer},
		{[]string{"clean", "--connect-timeout", "1s", "--pg", "postgres://u:pw@" + silent + "/db"}, silent + noAnswer},
		{[]string{"clean", "--connect-timeout", "1s", "--redis", "redis://" + garbage}, garbage + ` does not speak the Redis protocol: it answered "garbage\r\n"`},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			t.Parallel() // each waits out its 1s
			start := time.Now()
			code, _, errs := cli(t, tc.args...)
			if took := time.Since(start); code != 3 || !strings.Contains(errs, tc.want) || took > 5*time.Second {
				t.Errorf("%v: exit %d after %s, stderr %q; want 3 and %q", tc.args, code, took, errs, tc.want)
			}
		})
	}
}

// passwordPGURLs are PostgreSQL URLs and DSNs with a password (s3cr3t), in
// every form, parsable or not.
var passwordPGURLs = []string{
	"postgres://u:s3cr3t@127.0.0.1:1/x",
	"postgres://u:s3cr3t@127.0.0.1:1/x?application_name=a@b",
	"postgresql://u:s3cr3t:x@127.0.0.1:1/x",
	"postgres://u:s3cr3t@x@127.0.0.1:1/x",
	"postgres://u:s3cr3t@[bad",
	"postgres://u@127.0.0.1:1/x?password=s3cr3t",
	"host=127.0.0.1 port=1 password=s3cr3t",
	"host=127.0.0.1 port=1 password='s3cr3t x'",
	"host=127.0.0.1 port=1 password='s3cr3t",
}

// Every registered broker kind needs its cases here: a new one without
// them fails the test.
var passwordBrokerURLs = map[string][]string{
	broker.Redis:    {"redis://:s3cr3t@127.0.0.1:1", "redis://u:s3cr3t@127.0.0.1:1/0", "redis://u:s3cr3t@[bad", "redis://u:s3cr3t@127.0.0.1:x"},
	broker.NATS:     {"nats://u:s3cr3t@127.0.0.1:1", "nats://s3cr3t@127.0.0.1:1", "nats://u:s3cr3t@[bad"},
	broker.RabbitMQ: {"amqp://u:s3cr3t@127.0.0.1:1/", "amqp://u:s3cr3t@[bad", "amqp://u:s3cr3t@127.0.0.1:x/"},
	broker.Kafka:    {"u:s3cr3t@127.0.0.1:1", "kafka://u:s3cr3t@127.0.0.1:1"},
}

// TestNoPasswordInErrors feeds a password through every server flag of run,
// clean, soak and bench, in every URL and DSN form, parsable or not, and
// finds it in no output.
func TestNoPasswordInErrors(t *testing.T) {
	t.Parallel()
	f := scenarioFile(t, "ok.yaml", contractExample)
	pgs := passwordPGURLs
	brokerURLs := passwordBrokerURLs
	var cases [][]string
	for _, u := range pgs {
		cases = append(cases, []string{"run", "--pg", u, f}, []string{"clean", "--pg", u}, []string{"soak", "--events", "1", "--pg", u})
	}
	for _, u := range brokerURLs[broker.Redis] {
		cases = append(cases, []string{"soak", "--events", "1", "--redis", u})
	}
	for _, k := range broker.Kinds() {
		if len(brokerURLs[k.Name]) == 0 {
			t.Errorf("no password case for --%s", k.Flag)
		}
		for _, u := range brokerURLs[k.Name] {
			cases = append(cases, []string{"run", "--broker", k.Name, "--" + k.Flag, u, f}, []string{"clean", "--" + k.Flag, u})
		}
	}
	if !testing.Short() {
		cases = append(cases, []string{"bench", "--repeat", "1", "--soak-events", "0", "--growth", "1", "--pg", pgs[0], f})
	}
	check := func(t *testing.T, args []string) {
		code, out, errs := cli(t, args...)
		if code == 0 || strings.Contains(out+errs, "s3cr3t") {
			t.Errorf("%q: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
		}
	}
	// The runs, soaks and bench at once (each fails on its own server
	// flag); the cleans one by one after them, as the one test that cleans
	// the shared servers just then: clean also takes what a dead run left
	// on the test servers, and on the temp dir.
	t.Run("runs", func(t *testing.T) {
		for i, args := range cases {
			if args[0] != "clean" {
				t.Run(strconv.Itoa(i), func(t *testing.T) { t.Parallel(); check(t, args) })
			}
		}
	})
	testservers.CleanAlone(t)
	for _, args := range cases {
		if args[0] == "clean" {
			check(t, args)
		}
	}
}

// The flags' defaults come from the environment: --help shows them, their
// passwords hidden.
func TestNoPasswordInHelp(t *testing.T) {
	pgs, brokerURLs := passwordPGURLs, passwordBrokerURLs
	t.Setenv("RUNNER_PG_URL", pgs[0])
	for _, k := range broker.Kinds() {
		t.Setenv(k.Env, brokerURLs[k.Name][0])
	}
	for _, cmd := range []string{"run", "clean", "soak", "bench"} {
		if _, out, errs := run0(cmd, "--help"); strings.Contains(out+errs, "s3cr3t") || !strings.Contains(out, "***") {
			t.Errorf("%s --help:\n%s%s", cmd, out, errs)
		}
	}
}

// TestControlCharactersEscaped: a scenario's name, tags and values holding
// ESC, CR, LF and NUL reach the console, list, validate errors, Markdown
// and the guarantees document escaped, Go %q style: no raw control
// character, no forged line.
func TestControlCharactersEscaped(t *testing.T) {
	evil := `"evil\e[2J\r\nFAKE: ok\0"`
	f := scenarioFile(t, "evil.yaml", "name: "+evil+"\ntags: [outbox]\nsteps:\n"+
		"  - produce: {event: "+evil+", amount: 100}\n  - relay\n  - expect: {stream.entries: 2}\n")
	bad := scenarioFile(t, "bad.yaml", "name: "+evil+"\nsteps:\n  - produce: {event: e, amount: "+evil+"}\n  - "+evil+"\n")
	md := filepath.Join(t.TempDir(), "r.md")
	gu := filepath.Join(t.TempDir(), "g.md")
	check := func(what, out string) {
		t.Helper()
		for _, c := range out {
			if c < 0x20 && c != '\n' || c == 0x7f {
				t.Errorf("%s: raw control character %q in\n%s", what, c, out)
				return
			}
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(strings.TrimLeft(line, " |"), "FAKE") {
				t.Errorf("%s: forged line %q in\n%s", what, line, out)
			}
		}
		if !strings.Contains(out, `\x1b[`) && !strings.Contains(out, `\x1b\[`) { // Markdown escapes the [ too
			t.Errorf("%s: no escaped ESC in\n%s", what, out)
		}
	}
	code, out, errs := cli(t, "run", "-v", "--markdown", md, "--guarantees", gu, f)
	if code != 1 {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errs)
	}
	check("run", out)
	for _, p := range []string{md, gu} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		check(p, string(b))
	}
	_, out, _ = cli(t, "list", f)
	check("list", out)
	_, _, errs = cli(t, "validate", bad)
	check("validate", errs)
}

// TestLongValuesCut: a 2 MB event id (refused by PostgreSQL's index) and a
// 2,500-byte one (that goes all the way through) leave every report small:
// each value cut with a marker saying how long it was.
func TestLongValuesCut(t *testing.T) {
	const failing = "  - relay\n  - consume\n  - expect: {stream.entries: 2}\n"
	big := scenarioFile(t, "big.yaml", "name: big\nsteps:\n  - produce: {event: "+strings.Repeat("x", 2_000_000)+", amount: 100}\n"+failing)
	long := scenarioFile(t, "long.yaml", "name: long\nsteps:\n  - produce: {event: "+strings.Repeat("y", 2500)+", amount: 100}\n"+failing)
	dir := t.TempDir()
	reports := map[string]string{"--junit": "r.xml", "--json": "r.json", "--markdown": "r.md"}
	args := []string{"run", "-v", big, long}
	for flag, name := range reports {
		args = append(args, flag, filepath.Join(dir, name))
	}
	code, out, errs := cli(t, args...)
	if code != 1 {
		t.Fatalf("exit %d\n%.2000s\n%.2000s", code, out, errs)
	}
	outputs := map[string]string{"console": out + errs}
	for _, name := range reports {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		outputs[name] = string(b)
	}
	for what, s := range outputs {
		if len(s) > 32<<10 || strings.Contains(s, strings.Repeat("x", 300)) || strings.Contains(s, strings.Repeat("y", 300)) {
			t.Errorf("%s: %d bytes, a value not cut:\n%.3000s", what, len(s), s)
		}
	}
	if !strings.Contains(out, "…(2,000,000 bytes)") || !strings.Contains(out, "…(2,500 bytes)") {
		t.Errorf("console: no marker saying how long the values were:\n%.3000s", out)
	}
}

// hello serves a connection by writing msg (nil: nothing) and keeping it open.
func hello(msg []byte) func(net.Conn) {
	return func(c net.Conn) {
		if msg != nil {
			_, _ = c.Write(msg)
		}
		time.Sleep(10 * time.Second)
	}
}

// TestBenchNeedsScenariosForTheLibraryOnly: an installed binary measures
// its start and isolation from any directory (it said "stat scenarios"
// there); scenario paths with no library section are a usage error.
func TestBenchNeedsScenariosForTheLibraryOnly(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(runnerBin(t), "bench", "--repeat", "1", "--only", "isolation", "--connect-timeout", "1s", "--pg", "postgres://postgres@127.0.0.1:1/postgres")
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != exitEnvironment || strings.Contains(string(out), "stat scenarios") {
		t.Errorf("bench --only isolation away from scenarios/: exit %d (%v), want 3 for the unreachable server:\n%s", code, err, out)
	}
	f := scenarioFile(t, "a.yaml", "name: a\nsteps: [produce]\n")
	if code, _, errs := cli(t, "bench", "--only", "start", f); code != exitInvalid || !strings.Contains(errs, "scenario paths are for the library section only") {
		t.Errorf("bench --only start FILE: exit %d, %s", code, errs)
	}
}
