package main

import (
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKeepHintsHideTheNATSToken (issue 41, M6): with a NATS server that
// takes a token (nats://TOKEN@host: the user info, no password), the
// --keep hints printed `nats --server nats://S3cr3tNatsTok@…`; redaction
// hid passwords only. No output of the run holds the token now.
func TestKeepHintsHideTheNATSToken(t *testing.T) {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Skip("no nats-server")
	}
	const token = "S3cr3tNatsTok"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", t.TempDir(), "--auth", token)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nats-server never listened")
		}
	}
	url := "nats://" + token + "@127.0.0.1:" + strconv.Itoa(port)
	sc := scenarioFile(t, "kept.yaml", "name: kept on nats\nsteps:\n  - produce\n  - relay\n")
	code, out, errOut := cli(t, "run", "--broker", "nats", "--nats", url, "--keep", "all", sc)
	dbs := regexp.MustCompile(`/(drill_[0-9a-f]{8}_\d+_[pc])'`).FindAllStringSubmatch(out, -1)
	defer dropKept(t, dbs)
	if code != exitOK {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, token) {
		t.Errorf("the token is in the output:\n%s%s", out, errOut)
	}
	if want := "nats --server nats://***@127.0.0.1:" + strconv.Itoa(port) + " stream info"; !strings.Contains(out, want) {
		t.Errorf("no hint %q in:\n%s", want, out)
	}
}
