package main

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chromium is Debian's headless browser, which the HTML report is checked
// in as a person would see it; the test skips, saying so, without one.
func chromium(t *testing.T) string {
	t.Helper()
	bin := chromiumOrEmpty()
	if bin == "" {
		t.Skip("no chromium to open the HTML report in: apt-get install chromium")
	}
	return bin
}

// chromiumOrEmpty is chromium's path, "" where there is none.
func chromiumOrEmpty() string {
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	return ""
}

// headless runs chromium on the file with args (--dump-dom,
// --screenshot=…), a profile of its own and no sandbox (a test runs as
// root in CI's container), and returns what it wrote to stdout.
func headless(t *testing.T, bin, file string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
		"--user-data-dir=" + t.TempDir()}, args...)
	cmd := exec.CommandContext(ctx, bin, append(args, "file://"+file)...)
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
	}
	return string(out)
}

// teamFailure is a team's drill that fails with a picture in it: the
// relay killed with its XADD reply held, then the ack-first consumer's
// COMMIT refused (acked_without_effect). Its paths are relative, as a
// person would give them: they show in the screenshot.
const (
	teamFailure       = "testdata/html/team-failure.yaml"
	teamFailureSystem = "../../examples/node/system-ack-first.yaml"
)

// A team's failing drill, opened in a browser: the HTML report shows the
// wire (a lane per process, the killed relay marked; the databases and
// the broker; the operations as arrows), the faults where they struck, the
// settle window and the violation lit on the arrows its witness rests on.
// With -update it keeps a screenshot for the README.
func TestHTMLTeamFailureInChromium(t *testing.T) {
	needNode(t, "ioredis", "pg")
	bin := chromium(t)
	t.Parallel()
	out := filepath.Join(t.TempDir(), "report.html")
	code, stdout, stderr := cliEnv(t, nil, "run", "--system", teamFailureSystem, "--settle", "1s", "--html", out, teamFailure)
	if code != exitFailed || !strings.Contains(stdout, "acked_without_effect") {
		t.Fatalf("exit %d, want 1 with acked_without_effect\n%s\n%s", code, stdout, stderr)
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	dom := headless(t, bin, out, "--dump-dom")
	t.Logf("report %d bytes; chromium --dump-dom took %s", fi.Size(), time.Since(start).Round(time.Millisecond))
	for want, n := range map[string]int{
		`<g class="lane process killed">`: 1, `<g class="lane database">`: 2, `<g class="lane broker">`: 1,
		`>relay #1</text>`: 1, `>consumer #2</text>`: 1, `>⚡ FAULT broker.reply(XADD) nth=1 do=kill: held, then the process killed`: 1,
		`<g class="row arrow fault">`: 2, `<g class="row mark fault">`: 2, `class="row arrow witness" data-v="s1-v0"`: 2,
		`<rect class="settle"`: 1, `<li class="violation" data-v="s1-v0"`: 1, `<div class="replay">`: 1,
	} {
		if got := strings.Count(dom, want); got < n {
			t.Errorf("the DOM has %d × %s, want %d", got, want, n)
		}
	}
	if n := strings.Count(dom, `<g class="row arrow`); n < 6 {
		t.Errorf("%d arrows in the DOM, want the wire's (XADD, XREADGROUP, XACK, COMMIT, …)", n)
	}
	if u := flag.Lookup("update"); u != nil && u.Value.String() == "true" {
		shot, err := filepath.Abs("../../docs/img/report-team-failure.png")
		if err != nil {
			t.Fatal(err)
		}
		headless(t, bin, out, "--window-size=1300,1750", "--screenshot="+shot)
		t.Logf("-update: wrote %s", shot)
	}
}

// The statement a database fault strikes is drawn on the timeline: an
// arrow from the consumer's process to its database, named by its command
// (the proxy keeps the reply's tag, never SQL), with the fault; the
// database lane says what its proxies recorded and what they never do.
func TestHTMLDatabaseStatementOnTheTimeline(t *testing.T) {
	needNode(t, "ioredis", "pg")
	t.Parallel()
	out := filepath.Join(t.TempDir(), "report.html")
	code, stdout, stderr := cliEnv(t, nil, "run", "--system", "../../examples/node/system.yaml", "--settle", "1s", "--html", out, "testdata/html/team-statement.yaml")
	if code != exitOK {
		t.Fatalf("exit %d, want 0 (the delivery retried)\n%s\n%s", code, stdout, stderr)
	}
	body, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	html := string(body)
	arrow := regexp.MustCompile(`<g class="row arrow fault"><title>[^<]* INSERT \(inbox\) — fault consumer_db\.statement\(table=inbox\) nth=1 do=error: held, then answered with an error</title>`)
	if !arrow.MatchString(html) {
		t.Errorf("no INSERT (inbox) arrow struck by the fault in the report:\n%s", html)
	}
	if !strings.Contains(html, "<li><b>Consumer PG</b>: the services&#39; proxies recorded ") || !strings.Contains(html, "1 statement(s) by command") {
		t.Errorf("the Consumer PG lane does not say what its proxies recorded")
	}
}

// A path the report cannot be written to is refused before anything runs.
func TestHTMLPathRefusedBeforeTheRun(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link.html")
	if err := os.Symlink(filepath.Join(dir, "target"), link); err != nil {
		t.Fatal(err)
	}
	sc := scenarioFile(t, "a.yaml", "name: a\nsteps:\n  - produce\n")
	for path, want := range map[string]string{
		filepath.Join(dir, "none", "r.html"): "its directory is not there",
		link:                                 "is a symbolic link",
		dir:                                  "is not a regular file",
	} {
		code, _, stderr := cli(t, "run", "--html", path, sc)
		if code != exitInvalid || !strings.Contains(stderr, want) {
			t.Errorf("--html %s: exit %d, want %d and %q\n%s", path, code, exitInvalid, want, stderr)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "target")); err == nil {
		t.Error("the symlink's target was written")
	}
}
