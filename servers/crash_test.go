package servers

import (
	"strings"
	"testing"
)

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
