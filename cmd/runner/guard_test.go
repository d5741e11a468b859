package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/internal/testutil"
)

// sparse makes a file of size bytes that takes no disk (and no memory
// unless it is read).
func sparse(t *testing.T, name string, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return p
}

// A scenario file over 4 MiB is refused from its size, before a byte of it
// is read: a 100 MiB file (sparse) costs validate, list and run nothing.
func TestScenarioFileSizeCap(t *testing.T) {
	big := sparse(t, "big.yaml", 100<<20)
	want := big + " is 100 MiB (104857600 bytes): a scenario file may be at most 4 MiB\n"
	dir := filepath.Dir(big)
	for _, args := range [][]string{{"validate", "--offline", big}, {"list", big}, {"run", big}, {"validate", "--offline", dir}} {
		testutil.Within(t, 5*time.Second, strings.Join(args, " "), func() {
			var code int
			var out, errs string
			grew := testutil.Allocated(func() { code, out, errs = run0(args...) })
			if code != exitInvalid || out != "" || !strings.HasPrefix(errs, want) {
				t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", args, code, out, errs, want)
			}
			if grew > 16<<20 {
				t.Errorf("%v: refusing a 100 MiB file allocated %d MiB", args, grew>>20)
			}
		})
	}
}

// A system file named by --system or by a scenario's system: key that is
// not a regular file, or too large, is refused at once, exit 2, never read:
// /dev/zero filled memory, a FIFO blocked past --timeout and SIGTERM.
func TestSystemFileGuarded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "system.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := sparse(t, "big.yaml", 5<<20)
	for _, c := range []struct{ path, why string }{
		{"/dev/zero", "/dev/zero is not a regular file (a character device)"},
		{fifo, fifo + " is not a regular file (a FIFO)"},
		{dir, dir + " is not a regular file (a directory)"},
		{big, big + " is 5 MiB (5242880 bytes): a system file may be at most 4 MiB"},
		{filepath.Join(dir, "nope.yaml"), filepath.Join(dir, "nope.yaml") + ": no such file or directory"},
	} {
		sc := scenarioFile(t, "sc.yaml", "name: x\nsystem: "+c.path+"\nsteps: [produce]\n")
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"validate", "--offline", "--system", c.path}, "runner: --system: " + c.why + "\n"},
			{[]string{"run", "--system", c.path, scenarioFile(t, "plain.yaml", "name: p\nsteps: [produce]\n")}, "runner: --system: " + c.why + "\n"},
			{[]string{"validate", "--offline", sc}, sc + ":2:9: system: " + c.why + "\n"},
			{[]string{"run", sc}, sc + ":2:9: system: " + c.why + "\n"},
		} {
			testutil.Within(t, 5*time.Second, strings.Join(tc.args, " "), func() {
				var code int
				var out, errs string
				grew := testutil.Allocated(func() { code, out, errs = run0(tc.args...) })
				if code != exitInvalid || out != "" || !strings.HasPrefix(errs, tc.want) {
					t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, out, errs, tc.want)
				}
				if grew > 16<<20 {
					t.Errorf("%v: allocated %d MiB", tc.args, grew>>20)
				}
			})
		}
	}
}

// A schema file that is not a regular file, too large, missing or
// unreadable is an error at its key in the system file, from validate
// (offline too) and run, exit 2, at once: a FIFO hung them, /dev/zero
// filled memory, a directory passed validate --offline.
func TestSchemaFilesGuarded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "producer.sql")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := sparse(t, "big.sql", 17<<20)
	cases := []struct{ path, why string }{
		{"/dev/zero", "/dev/zero is not a regular file (a character device)"},
		{fifo, fifo + " is not a regular file (a FIFO)"},
		{dir, dir + " is not a regular file (a directory)"},
		{big, big + " is 17 MiB (17825792 bytes): a schema (SQL) file may be at most 16 MiB"},
		{filepath.Join(dir, "nope.sql"), filepath.Join(dir, "nope.sql") + ": no such file or directory"},
	}
	if os.Geteuid() != 0 { // root reads anything
		locked := filepath.Join(dir, "locked.sql")
		if err := os.WriteFile(locked, []byte("SELECT 1;"), 0o000); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ path, why string }{locked, locked + ": permission denied"})
	}
	for _, c := range cases {
		sys := teamSystem(t, "producer: producer.sql", "producer: "+c.path)
		want := fmt.Sprintf("%s:7:20: schema.producer: %s\n", sys, c.why)
		pay := scenarioFile(t, "pay.yaml", paymentScenario)
		for _, args := range [][]string{
			{"validate", "--offline", "--system", sys},
			{"validate", "--system", sys},
			{"run", "--system", sys, pay},
		} {
			testutil.Within(t, 10*time.Second, strings.Join(args, " "), func() {
				var code int
				var out, errs string
				grew := testutil.Allocated(func() { code, out, errs = cli(t, args...) })
				if code != exitInvalid || out != "" || !strings.HasPrefix(errs, want) {
					t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", args, code, out, errs, want)
				}
				if grew > 64<<20 {
					t.Errorf("%v: allocated %d MiB", args, grew>>20)
				}
			})
		}
	}
}

// crash is a command that panics, as a bug in a command would.
func crash(context.Context, []string, io.Writer, io.Writer) int {
	var m map[string]int
	m["boom"]++ // assignment to entry in nil map
	return exitOK
}

var panicNote = regexp.MustCompile(`^runner: internal error \(a bug in the runner, please report it\): assignment to entry in nil map; the stack is in (\S+)\n$`)

// A panic inside a command is an internal error: exit 4 (never 2, which
// says the input is invalid), one line naming a file that holds the panic
// and its stack.
func TestPanicIsAnInternalError(t *testing.T) {
	commands["crash"] = crash
	defer delete(commands, "crash")
	t.Setenv("TMPDIR", t.TempDir())
	var code int
	var out, errs string
	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Fatalf("Main let the panic through: %v", v)
			}
		}()
		code, out, errs = run0("crash", "--pg", "postgres://u:s3cr3t@h/db")
	}()
	m := panicNote.FindStringSubmatch(errs)
	if code != 4 || out != "" || m == nil {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 4 and one line matching %s", code, out, errs, panicNote)
	}
	if filepath.Dir(m[1]) != os.Getenv("TMPDIR") {
		t.Errorf("the stack file %s is not in TMPDIR", m[1])
	}
	b, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"panic: assignment to entry in nil map", "goroutine ", ".crash(", "runner version: ", "command: runner crash"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the stack file lacks %q:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), "s3cr3t") {
		t.Errorf("the stack file holds the password:\n%s", b)
	}
}

// The same through a real process: a panic used to exit 2, the code of an
// invalid scenario.
func TestPanicExitCodeOfTheProcess(t *testing.T) {
	if os.Getenv("RUNNER_TEST_CRASH") == "1" {
		commands["crash"] = crash
		os.Args = []string{"runner", "crash"}
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPanicExitCodeOfTheProcess$")
	cmd.Env = append(os.Environ(), "RUNNER_TEST_CRASH=1", "TMPDIR="+t.TempDir())
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 4 || !panicNote.MatchString(string(out)) {
		t.Fatalf("exit %d, want 4 and one line naming the stack file:\n%s", code, out)
	}
}

// The flag cases the red team found: an empty --broker ran Redis; a URL
// that does not parse was exit 3 (servers), not 2 (usage); an absurd
// duration said "want > 0".
func TestFlagEdgeCases(t *testing.T) {
	for _, env := range []string{"RUNNER_PG_URL", "RUNNER_REDIS_URL", "RUNNER_NATS_URL", "RUNNER_RABBITMQ_URL", "RUNNER_KAFKA_URL"} {
		t.Setenv(env, "") // a regression must not clean or run on the machine's servers
	}
	f := scenarioFile(t, "a.yaml", "name: a\nsteps: [produce]\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--broker", "", f}, "runner: --broker: empty; want redis, nats, rabbitmq, kafka, all, or a list such as redis,nats\n"},
		{[]string{"run", "--broker=", f}, "runner: --broker: empty; want redis, nats, rabbitmq, kafka, all, or a list such as redis,nats\n"},
		{[]string{"run", "--broker", "all,redis", f}, "runner: --broker \"all,redis\": all stands alone (it is every broker); or list them: redis,nats,rabbitmq,kafka\n"},
		{[]string{"run", "--broker", "redis,", f}, "runner: --broker \"redis,\": an empty name in the list; want a list such as redis,nats\n"},
		{[]string{"run", "--broker", "redis", "--broker", "natz", f}, "runner: --broker: unknown broker \"natz\" (did you mean \"nats\"?)"},
		{[]string{"run", "--pg", "postgres://u:s3cr3t@[bad", f}, "runner: --pg: not a PostgreSQL URL or DSN: "},
		{[]string{"run", "--pg", "host=h port=x password=s3cr3t", f}, "runner: --pg: not a PostgreSQL URL or DSN: "},
		// pgx took what follows a second @ for the host, and said it.
		{[]string{"run", "--pg", "postgres://u:ab@s3cr3t@127.0.0.1:1/postgres", f}, "runner: --pg: not a PostgreSQL URL or DSN: the user info holds an @ that is not percent-encoded"},
		// pgx reads a blank DSN as the local socket's defaults.
		{[]string{"run", "--pg", " ", f}, "runner: --pg: blank: give a URL, or leave it unset"},
		{[]string{"run", "--redis", "redis://u:s3cr3t@[bad", f}, "runner: --redis: not a Redis URL: "},
		{[]string{"run", "--redis", "http://u:s3cr3t@h:6379", f}, "runner: --redis: not a Redis URL: "},
		{[]string{"run", "--broker", "nats", "--nats", "nats://u:s3cr3t@[bad", f}, "runner: --nats: not a NATS URL: "},
		{[]string{"run", "--broker", "rabbitmq", "--rabbitmq", "amqp://u:s3cr3t@h:x/", f}, "runner: --rabbitmq: not a RabbitMQ URL: "},
		{[]string{"run", "--broker", "kafka", "--kafka", "u:s3cr3t@h:9092", f}, "runner: --kafka: not HOST:PORT[,HOST:PORT...]: "},
		{[]string{"validate", "--pg", "postgres://u:s3cr3t@[bad", "--system", teamSystem(t)}, "runner: --pg: not a PostgreSQL URL or DSN: "},
		{[]string{"clean", "--pg", "postgres://u:s3cr3t@[bad"}, "runner: --pg: not a PostgreSQL URL or DSN: "},
		{[]string{"clean", "--redis", "redis://u:s3cr3t@[bad"}, "runner: --redis: not a Redis URL: "},
		{[]string{"soak", "--events", "1", "--pg", "postgres://u:s3cr3t@[bad"}, "runner: --pg: not a PostgreSQL URL or DSN: "},
		{[]string{"bench", "--pg", "postgres://u:s3cr3t@[bad", f}, "runner: --pg: not a PostgreSQL URL or DSN: "},
		{[]string{"run", "--timeout", "9999999h", f}, `runner run: --timeout "9999999h": too long: at most 24h` + "\n"},
		{[]string{"run", "--timeout", "25h", f}, `runner run: --timeout "25h": too long: at most 24h` + "\n"},
		{[]string{"run", "--connect-timeout", "99999999999h", f}, `runner run: --connect-timeout "99999999999h": too long: at most 1h` + "\n"},
		{[]string{"clean", "--connect-timeout", "2h"}, `runner clean: --connect-timeout "2h": too long: at most 1h` + "\n"},
		{[]string{"run", "--settle", "9999999h", f}, `runner run: --settle "9999999h": too long: at most 10m` + "\n"},
	} {
		code, out, errs := run0(tc.args...)
		if code != exitInvalid || out != "" || !strings.HasPrefix(errs, tc.want) || strings.Contains(errs, "s3cr3t") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q, no password", tc.args, code, out, errs, tc.want)
		}
	}
	// An @ past the authority (a query's) is no user info: not refused as one.
	if code, _, errs := run0("run", "--pg", "postgres://u@127.0.0.1:1?application_name=a@b", "--connect-timeout", "1s", f); code == exitInvalid || strings.Contains(errs, "user info holds an @") {
		t.Errorf("a query's @: exit %d, %s", code, errs)
	}
	// A URL from the environment is named by its variable.
	t.Setenv("RUNNER_PG_URL", "postgres://u:s3cr3t@[bad")
	if code, _, errs := run0("run", f); code != exitInvalid || !strings.HasPrefix(errs, "runner: RUNNER_PG_URL (the default of --pg): not a PostgreSQL URL or DSN: ") || strings.Contains(errs, "s3cr3t") {
		t.Errorf("RUNNER_PG_URL: exit %d, stderr %q", code, errs)
	}
	t.Setenv("RUNNER_PG_URL", "")
	// The edges still parse.
	for _, args := range [][]string{{"run", "--timeout", "24h", "-h"}, {"run", "--connect-timeout", "1h", "-h"}, {"run", "--settle", "10m", "-h"}} {
		if code, _, errs := run0(args...); code != exitOK {
			t.Errorf("%v: exit %d: %s", args, code, errs)
		}
	}
}

// What a team's service says reaches the console, the JSON, JUnit and
// Markdown reports with every password of every URL handed to it hidden,
// in every encoding: a percent-encoded user info password and a
// ?password= in the query showed (the red team's P%40ss%2Fw0rd%3A1).
func TestServiceOutputHidesPasswordsEverywhere(t *testing.T) {
	t.Parallel()
	admin, err := url.Parse(testservers.PG(t))
	if err != nil {
		t.Fatal(err)
	}
	// The test servers trust local connections: any password logs in.
	admin.User = url.UserPassword(admin.User.Username(), "P@ss/w0rd:1")
	q := admin.Query()
	q.Set("password", "qu3ry-s3cret")
	admin.RawQuery = q.Encode()
	script := `echo "producer=$DB"; echo "consumer=$CDB"; echo "decoded P@ss/w0rd:1 lower P%40ss%2fw0rd%3a1 json P@ss\/w0rd:1"; echo "dsn password=qu3ry-s3cret"; echo ready; sleep 600`
	sys := teamSystem(t, `  idle: {run: [sleep, "600"]}`, `  idle: {run: [sleep, "600"]}
  talker: {run: [sh, -c, '`+script+`'], env: {DB: "${producer_db.url}", CDB: "${consumer_db.url}"}, ready: {log: ready}}`)
	sc := scenarioFile(t, "talk.yaml", "name: a service that prints its URLs\nsystem: "+sys+"\nsteps:\n  - start: talker\n  - expect: {stream.entries: 1}\n")
	dir := t.TempDir()
	reports := map[string]string{"json": filepath.Join(dir, "r.json"), "junit": filepath.Join(dir, "r.xml"), "markdown": filepath.Join(dir, "r.md")}
	code, out, errs := cli(t, "run", "--pg", admin.String(), "--json", reports["json"], "--junit", reports["junit"], "--markdown", reports["markdown"], sc)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1 (the expectation fails)\n%s%s", code, out, errs)
	}
	texts := map[string]string{"console": out + errs}
	for k, p := range reports {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		texts[k] = string(b)
	}
	for where, text := range texts {
		label := "service talker (started at "
		if where == "json" {
			label = `"service": "talker"`
		}
		if !strings.Contains(text, label) || !strings.Contains(text, "producer=postgres://postgres:***@") {
			t.Errorf("%s: no output of the service:\n%s", where, text)
		}
		for _, leak := range []string{"w0rd", "qu3ry", "s3cret"} {
			if strings.Contains(text, leak) {
				t.Errorf("%s shows %q:\n%s", where, leak, text)
			}
		}
	}
}
