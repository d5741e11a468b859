package servers

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsJS connects to url, for one test.
func natsJS(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// storedMsgs lists the payloads in stream name.
func storedMsgs(t *testing.T, js jetstream.JetStream, name string) []string {
	t.Helper()
	ctx := testCtx(t)
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	state := st.CachedInfo().State
	for seq := state.FirstSeq; seq <= state.LastSeq && state.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get %d: %v", seq, err)
		}
		out = append(out, string(m.Data))
	}
	return out
}

func TestNATS(t *testing.T) {
	ctx := testCtx(t)
	start := time.Now()
	n, err := StartNATS(ctx, NATSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })
	t.Logf("started in %v at %s (pid %d, dir %s)", time.Since(start), n.URL(), n.PID(), n.Dir)
	url, pid, dir := n.URL(), n.PID(), n.Dir
	assertOwnGroup(t, pid)

	js := natsJS(t, url)
	cfg := jetstream.StreamConfig{Name: "drill", Subjects: []string{"drill.>"}, Storage: jetstream.FileStorage}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "drill.a", []byte("before kill")); err != nil {
		t.Fatal(err)
	}

	if err := n.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(pid, 0) == nil || n.PID() != 0 {
		t.Fatalf("pid %d runs after Kill (PID() = %d)", pid, n.PID())
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n.URL() != url || n.PID() == pid || n.PID() == 0 {
		t.Errorf("after Start: %s pid %d; want %s and a new pid", n.URL(), n.PID(), url)
	}
	js = natsJS(t, url)
	if got := storedMsgs(t, js, "drill"); strings.Join(got, "|") != "before kill" {
		t.Errorf("after Kill and Start the stream holds %q; want [before kill]", got)
	}

	// A clean halt keeps the data too.
	if _, err := js.Publish(ctx, "drill.b", []byte("before halt")); err != nil {
		t.Fatal(err)
	}
	if err := n.Halt(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	js = natsJS(t, url)
	if got := storedMsgs(t, js, "drill"); strings.Join(got, "|") != "before kill|before halt" {
		t.Errorf("after Halt and Start the stream holds %q", got)
	}

	pid = n.PID()
	if err := n.Discard(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, pid, dir)
	if err := n.Stop(ctx); err != nil {
		t.Errorf("Stop after Discard: %v", err)
	}
}

func TestNATSMissingBinary(t *testing.T) {
	_, err := StartNATS(testCtx(t), NATSOptions{Binary: "/nonexistent/nats-server"})
	var mb *MissingBinaryError
	if !errors.As(err, &mb) {
		t.Fatalf("got %v (%T), want *MissingBinaryError", err, err)
	}
	for _, want := range []string{`"nats-server"`, "apt-get install", "/nonexistent/nats-server"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %s: %s", want, err)
		}
	}
}

func TestNATSLostPortDetected(t *testing.T) {
	// The real log line of nats-server 2.9 when the port is taken.
	se := &startError{what: "nats-server exited while starting", output: `[FTL] Error listening on port: 127.0.0.1:4222, "listen tcp 127.0.0.1:4222: bind: address already in use"`}
	if !lostPortRace(se) {
		t.Error("bind failure not recognised")
	}
	if lostPortRace(&startError{output: "[FTL] bad flag"}) || lostPortRace(errors.New("address already in use")) {
		t.Error("other failures taken for a lost port")
	}
}

func TestNATSStartOnTakenPortFails(t *testing.T) {
	ctx := testCtx(t)
	n, err := StartNATS(ctx, NATSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })
	// Another server on the same port: the probe must not take it for ours.
	dir := t.TempDir()
	other := newNATS(n.binary, dir, "other")
	c, err := other.launch(ctx, n.ports)
	if err == nil {
		c.kill()
		t.Fatal("second server on a taken port started")
	}
	if !lostPortRace(err) {
		t.Errorf("error %v not recognised as a lost port", err)
	}
	if _, serr := os.Stat(n.Dir); serr != nil || n.PID() == 0 {
		t.Errorf("first server harmed: %v, pid %d", serr, n.PID())
	}
}
