package kafkaserver

import (
	"encoding/binary"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/internal/testutil"
)

// TestMain serves kfake when this test binary is re-executed as it.
func TestMain(m *testing.M) {
	ServeChild()
	os.Exit(m.Run())
}

// H4: kfake panics on an API key it does not know (a nil request in its
// client_conn); the panic ends its process, and the server names it with
// its stack. A kill the runner asked for is no crash.
func TestKfakePanicIsACrash(t *testing.T) {
	k, err := Start(testutil.ServerCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Discard(testutil.ServerCtx(t))
	c, err := net.Dial("tcp", k.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := binary.BigEndian.AppendUint32(nil, 10)
	msg = append(msg, 0x03, 0xe7, 0, 0, 0, 0, 0, 1, 0xff, 0xff) // key 999, v0, corr 1, no client id
	c.Write(msg)
	deadline := time.Now().Add(20 * time.Second)
	for k.Crashed() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cr := k.Crashed()
	if cr == nil {
		t.Fatal("kfake's panic was not seen")
	}
	if !strings.HasPrefix(cr.What, "panic: ") || !strings.Contains(cr.Stack, "goroutine ") {
		t.Errorf("crash %q, stack %q; want the panic and its goroutine", cr.What, cr.Stack)
	}
}

func TestKfakeKillIsNoCrash(t *testing.T) {
	k, err := Start(testutil.ServerCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Discard(testutil.ServerCtx(t))
	if err := k.Kill(testutil.ServerCtx(t)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if cr := k.Crashed(); cr != nil {
		t.Errorf("a kill was taken for a crash: %+v", cr)
	}
}
