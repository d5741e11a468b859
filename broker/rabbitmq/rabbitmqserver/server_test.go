package rabbitmqserver

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/servers"
)

// rabbitmqCtx bounds one RabbitMQ test: a node takes several seconds to
// start, and TestRabbitMQ starts it twice.
func rabbitmqCtx(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a RabbitMQ node (several seconds)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startRabbitMQ starts a node for one test and discards it at the end.
func startRabbitMQ(t *testing.T, ctx context.Context) *Server {
	t.Helper()
	start := time.Now()
	r, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Discard(context.Background()) })
	t.Logf("started in %v at %s (pid %d, dir %s)", time.Since(start).Round(time.Millisecond), r.URL(), r.PID(), r.Dir)
	return r
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	_, alive := servers.StartTime(pid)
	return alive
}

// procsMentioning lists the live processes whose command line or
// environment mentions s, like pgrep -f but also looking at environments.
func procsMentioning(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || !running(pid) {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		env, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		if bytes.Contains(cmdline, []byte(s)) || bytes.Contains(env, []byte(s)) {
			out = append(out, e.Name()+" "+string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return out
}

// assertNoneMentions checks no process mentioning dir is left: the node, its
// port programs and its epmd all run with dir in their environment.
func assertNoneMentions(t *testing.T, dir string) {
	t.Helper()
	var left []string
	if !testutil.Eventually(func() bool { left = procsMentioning(dir); return len(left) == 0 }) {
		t.Errorf("processes left behind:\n%s", strings.Join(left, "\n"))
	}
}

// amqpChannel connects to url for one test. The connection is closed when
// ctx is done: a call the broker never answers (basic.get on a leaderless
// quorum queue) then fails instead of hanging the test.
func amqpChannel(t *testing.T, ctx context.Context, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	t.Cleanup(func() { stop(); conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// publishConfirmed publishes a persistent message to queue and waits for the
// broker's confirm.
func publishConfirmed(t *testing.T, ctx context.Context, ch *amqp.Channel, queue, body string) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent, Body: []byte(body),
	})
	if err != nil {
		t.Fatal(err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil || !acked {
		t.Fatalf("confirm of %q: acked %v, %v", body, acked, err)
	}
}

// amqpGetOne takes one message from queue, waiting a little for it: a restarted
// node may still be recovering the queue.
func amqpGetOne(t *testing.T, ch *amqp.Channel, queue string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if ok {
			return string(m.Body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s is empty", queue)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestRabbitMQ(t *testing.T) {
	t.Parallel() // a node of its own, on ports of its own: its boot waits on nobody
	ctx := rabbitmqCtx(t)
	r := startRabbitMQ(t, ctx)
	url, pid, dir := r.URL(), r.PID(), r.Dir
	if !strings.HasPrefix(url, "amqp://guest:guest@127.0.0.1:") || strings.HasSuffix(url, ":5672/") {
		t.Errorf("URL() = %s", url)
	}
	testutil.AssertOwnGroup(t, pid)

	ch := amqpChannel(t, ctx, url)
	if _, err := ch.QueueDeclare("drill", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(ctx, "", "drill", true, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent, Body: []byte("hello"),
	}); err != nil {
		t.Fatal(err)
	}
	if got := amqpGetOne(t, ch, "drill"); got != "hello" {
		t.Errorf("got %q from the classic queue; want hello", got)
	}

	// A message the broker confirmed on a quorum queue survives a crash.
	qq := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	if _, err := ch.QueueDeclare("drill.qq", true, false, false, false, qq); err != nil {
		t.Fatal(err)
	}
	// RabbitMQ 3.10 (Ra 2.2) writes a new quorum queue's Ra server name to
	// names.dets lazily (auto-save after 500ms, synced only since Ra PR
	// #443): a node killed sooner restarts the queue as a new, empty member
	// that never elects a leader. Wait until the file holds the name (on a
	// loaded machine a fixed second was not always enough), as a real
	// queue would long have.
	awaitRaName(t, dir, "%2F_drill.qq")
	publishConfirmed(t, ctx, ch, "drill.qq", "before kill")

	if err := r.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if running(pid) || r.PID() != 0 {
		t.Fatalf("pid %d runs after Kill (PID() = %d)", pid, r.PID())
	}
	epmd := r.epmd.Load().PID()
	for _, p := range procsMentioning(dir) {
		if !strings.HasPrefix(p, strconv.Itoa(epmd)+" ") {
			t.Errorf("after Kill, only epmd (%d) should be left; found %s", epmd, p)
		}
	}

	start := time.Now()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted after kill in %v", time.Since(start).Round(time.Millisecond))
	if r.URL() != url || r.PID() == pid || r.PID() == 0 {
		t.Errorf("after Start: %s pid %d; want %s and a new pid", r.URL(), r.PID(), url)
	}
	getCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ch = amqpChannel(t, getCtx, url)
	if got := amqpGetOne(t, ch, "drill.qq"); got != "before kill" {
		t.Errorf("after Kill and Start the quorum queue holds %q; want before kill", got)
	}

	// A clean Stop of the restarted node leaves nothing behind either (one
	// node for both: a boot costs the machine ~9 CPU seconds), and the
	// probe does not take a node with another name for ours.
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "amqp://guest:guest@"), "/")
	if err := probeRabbitMQ(ctx, addr, r.node); err != nil {
		t.Errorf("probe of our node: %v", err)
	}
	if err := probeRabbitMQ(ctx, addr, "drill-other@localhost"); err == nil || !strings.Contains(err.Error(), "another RabbitMQ") {
		t.Errorf("probe expecting another node: %v; want it to refuse ours", err)
	}
	pid = r.PID()
	start = time.Now()
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped in %v", time.Since(start).Round(time.Millisecond))
	testutil.AssertGone(t, pid, dir)
	assertNoneMentions(t, dir)
	if err := r.Discard(ctx); err != nil {
		t.Errorf("Discard after Stop: %v", err)
	}
}

// unstartedRabbitMQ is a RabbitMQ with its dir prepared, ready for launch.
func unstartedRabbitMQ(t *testing.T) *Server {
	t.Helper()
	bin, epmd, err := findRabbitMQ("")
	if err != nil {
		t.Skip(err)
	}
	cred, err := Credential()
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: the node's user must be able to enter the dir.
	dir, err := os.MkdirTemp("", "drill-rabbitmq-test-*")
	if err != nil {
		t.Fatal(err)
	}
	r := newServer(bin, epmd, dir, cred)
	t.Cleanup(func() {
		if err := r.Discard(context.Background()); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("dir %s still exists after Discard (stat: %v)", dir, err)
		}
		assertNoneMentions(t, dir)
	})
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// TestRabbitMQLostPort checks that a launch on a port another process holds
// fails, is recognised as a lost port race (so start retries on new ports),
// and leaves no process behind.
func TestRabbitMQLostPort(t *testing.T) {
	t.Parallel() // a node of its own, on ports of its own: its boot waits on nobody
	ctx := rabbitmqCtx(t)
	t.Run("epmd", func(t *testing.T) {
		r := unstartedRabbitMQ(t)
		ports, err := rabbitmqFreePorts()
		if err != nil {
			t.Fatal(err)
		}
		ports.epmd = testutil.Occupy(t) // a stranger that accepts and never answers
		_, err = r.launch(ctx, ports)
		if !servers.LostPortRace(err) {
			t.Fatalf("launch with a busy epmd port: %v; want a lost port race", err)
		}
		t.Logf("%.300s", err)
	})
	t.Run("amqp", func(t *testing.T) {
		r := unstartedRabbitMQ(t)
		ports, err := rabbitmqFreePorts()
		if err != nil {
			t.Fatal(err)
		}
		ports.amqp = testutil.Occupy(t)
		start := time.Now()
		_, err = r.launch(ctx, ports)
		if !servers.LostPortRace(err) {
			t.Fatalf("launch with a busy AMQP port: %v; want a lost port race", err)
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			if strings.Contains(line, "eaddrinuse") {
				t.Logf("failed in %v: %.200s", time.Since(start).Round(time.Millisecond), line)
				break
			}
		}
	})
}

func TestRabbitMQMissingBinary(t *testing.T) {
	_, err := Start(testutil.ServerCtx(t), Options{Binary: "/nonexistent/rabbitmq-server"})
	var mb *servers.MissingBinaryError
	if !errors.As(err, &mb) {
		t.Fatalf("got %v (%T), want *servers.MissingBinaryError", err, err)
	}
	for _, want := range []string{`"rabbitmq-server"`, "apt-get install", "/nonexistent/rabbitmq-server"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %s: %s", want, err)
		}
	}
}

// awaitRaName waits until the node in dir has written the Ra server name
// of a quorum queue to its names.dets (the atom's text is in the file as
// is): from then on a killed node restarts the queue as itself.
func awaitRaName(t *testing.T, dir, name string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		files, _ := filepath.Glob(filepath.Join(dir, "mnesia", "*", "quorum", "*", "names.dets"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(name)) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no names.dets under %s holds %s after 20s: %v", dir, name, files)
		}
	}
}
