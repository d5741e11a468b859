package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	binOnce sync.Once
	bin     string
	binErr  error
)

// runnerBin builds the runner once: the reference services of a system
// file run it as `${runner} reference relay|consumer` (a test's own
// executable is the test binary).
func runnerBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "runner-bin-")
		if err != nil {
			binErr = err
			return
		}
		bin = filepath.Join(dir, "runner")
		out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
		if err != nil {
			binErr = err
			t.Logf("%s", out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return bin
}

func TestReferenceProcessesThroughTheProxies(t *testing.T) {
	t.Setenv("RUNNER_BIN", runnerBin(t))
	code, out, errOut := cli(t, "run", "../../examples/reference")
	if code != exitOK {
		t.Fatalf("exit %d, want 0\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "6 passed, 0 failed") {
		t.Errorf("want the six reference drills to pass:\n%s", out)
	}
}

// A system scenario's checks can fail, a fault that never fires fails its
// scenario, and a service the system file lacks is a load error.
func TestSystemScenariosCanFail(t *testing.T) {
	t.Setenv("RUNNER_BIN", runnerBin(t))
	sys, err := filepath.Abs("../../examples/reference/system.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wrong := scenarioFile(t, "wrong.yaml", `name: seed-3 with a wrong expectation
system: `+sys+`
steps:
  - produce(event=bus-1)
  - start: relay
  - start: {service: consumer, fault: {on: "consumer_db.commit(table=inbox)", do: kill}}
  - expect: {inbox.rows: 2, within: 3s}
`)
	code, out, _ := cli(t, "run", wrong)
	if code != exitFailed || !strings.Contains(out, "inbox.rows:") || !strings.Contains(out, "want 2, got 1") || !strings.Contains(out, "service consumer output") {
		t.Errorf("a wrong expectation: exit %d, want 1 naming inbox.rows, with the services' output:\n%s", code, out)
	}
	never := scenarioFile(t, "never.yaml", `name: a fault on a table nobody writes
system: `+sys+`
steps:
  - produce(event=bus-1)
  - start: relay
  - start: {service: consumer, fault: {on: "consumer_db.commit(table=held)", do: kill}}
  - expect: {inbox.rows: 1, within: 5s}
`)
	code, out, _ = cli(t, "run", never)
	if code != exitFailed || !strings.Contains(out, "never fired") {
		t.Errorf("a fault that never fires: exit %d, want 1 saying so:\n%s", code, out)
	}
	typo := scenarioFile(t, "typo.yaml", `name: a typo
system: `+sys+`
steps:
  - start: consumr
`)
	code, _, errOut := cli(t, "run", typo)
	if code != exitInvalid || !strings.Contains(errOut, `typo.yaml:4:5: start: no service "consumr"`) || !strings.Contains(errOut, `did you mean "consumer"?`) {
		t.Errorf("a misspelt service: exit %d, want 2 with file:line:col and did-you-mean:\n%s", code, errOut)
	}
}

// The foreign-stack example: a Node relay and consumer (pg + ioredis)
// drilled unchanged. The correct consumer passes the seed windows; the
// ack-first one fails them, and the history checker names its violation.
func TestNodeExample(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil || !exists("../../examples/node/node_modules/pg") {
		if os.Getenv("CI") != "" {
			t.Fatal("CI must install the Node example (npm ci --prefix examples/node): node or its modules are missing")
		}
		t.Skip("node or examples/node/node_modules missing: run npm ci --prefix examples/node")
	}
	code, out, errOut := cli(t, "run", "--system", "../../examples/node/system.yaml", "../../examples/node/scenarios")
	if code != exitOK {
		t.Fatalf("the correct Node services: exit %d, want 0\n%s\n%s", code, out, errOut)
	}
	code, out, _ = cli(t, "run", "--system", "../../examples/node/system-ack-first.yaml", "../../examples/node/scenarios")
	for _, want := range []string{"lost: consumer accounting, event bus-1", "acked_without_effect: consumer accounting, event bus-1"} {
		if code != exitFailed || !strings.Contains(out, want) {
			t.Errorf("the ack-first Node consumer: exit %d, want 1 naming %q:\n%s", code, want, out)
		}
	}
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }
