package servers

import (
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"
)

// H4: kfake panics on an API key it does not know (a nil request in its
// client_conn); the panic ends its process, and the server names it with
// its stack. A kill the runner asked for is no crash.
func TestKfakePanicIsACrash(t *testing.T) {
	k, err := StartKafka(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Discard(testCtx(t))
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
	k, err := StartKafka(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Discard(testCtx(t))
	if err := k.Kill(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if cr := k.Crashed(); cr != nil {
		t.Errorf("a kill was taken for a crash: %+v", cr)
	}
}

func TestCrashIn(t *testing.T) {
	log := "kfake serving [127.0.0.1:1]\npanic: runtime error: invalid memory address or nil pointer dereference\n[signal SIGSEGV]\n\ngoroutine 7 [running]:\nmain.f()\n"
	cr := crashIn(log)
	if cr == nil || cr.What != "panic: runtime error: invalid memory address or nil pointer dereference" || !strings.HasPrefix(cr.Stack, "panic:") {
		t.Errorf("crash %+v", cr)
	}
	if crashIn("no panic: here\n") != nil {
		t.Error("a panic found mid-line")
	}
}
