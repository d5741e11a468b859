package natsserver

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

	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/servers"
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
	ctx := testutil.ServerCtx(t)
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

func TestServer(t *testing.T) {
	ctx := testutil.ServerCtx(t)
	start := time.Now()
	n, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })
	t.Logf("started in %v at %s (pid %d, dir %s)", time.Since(start), n.URL(), n.PID(), n.Dir)
	url, pid, dir := n.URL(), n.PID(), n.Dir
	testutil.AssertOwnGroup(t, pid)

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
	testutil.AssertGone(t, pid, dir)
	if err := n.Stop(ctx); err != nil {
		t.Errorf("Stop after Discard: %v", err)
	}
}

func TestMissingBinary(t *testing.T) {
	_, err := Start(testutil.ServerCtx(t), Options{Binary: "/nonexistent/nats-server"})
	var mb *servers.MissingBinaryError
	if !errors.As(err, &mb) {
		t.Fatalf("got %v (%T), want *servers.MissingBinaryError", err, err)
	}
	for _, want := range []string{`"nats-server"`, "apt-get install", "/nonexistent/nats-server"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %s: %s", want, err)
		}
	}
}

func TestStartOnTakenPortFails(t *testing.T) {
	ctx := testutil.ServerCtx(t)
	n, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })
	// Another server on the same port: the probe must not take it for ours.
	dir := t.TempDir()
	other := newServer(n.binary, dir, "other")
	c, err := other.launch(ctx, n.Ports())
	if err == nil {
		c.Kill()
		t.Fatal("second server on a taken port started")
	}
	if !servers.LostPortRace(err) {
		t.Errorf("error %v not recognised as a lost port", err)
	}
	if _, serr := os.Stat(n.Dir); serr != nil || n.PID() == 0 {
		t.Errorf("first server harmed: %v, pid %d", serr, n.PID())
	}
}
