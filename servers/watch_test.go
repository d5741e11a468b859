package servers

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A Launch whose Ready reads a file of ReadyDir checks it again when that
// file is written, not only on its timer: with a timer of an hour, the
// wait below ends only through the watch (or fails after a minute).
func TestReadyCheckedWhenItsDirChanges(t *testing.T) {
	dir := t.TempDir()
	status := filepath.Join(dir, "status")
	dw, err := watchDir(dir)
	if err != nil {
		t.Skipf("no inotify here: %v", err)
	}
	defer dw.Close()
	cmd := exec.Command("sh", "-c", `sleep 0.2; echo starting > "$1"; sleep 0.2; echo ready > "$1"; exec sleep 60`, "sh", status)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c, err := startChild("sh", cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	checks := 0
	ready := func() error {
		checks++
		if b, err := os.ReadFile(status); err != nil || string(b) != "ready\n" {
			return errors.New("not ready yet")
		}
		return nil
	}
	err = waitReady(context.Background(), c, "", 0, time.Minute, ready, readyWatch{peek: time.Hour, changed: dw.C}, func(context.Context) error { return nil })
	if err != nil {
		t.Fatalf("waitReady: %v (ready checked %d times)", err, checks)
	}
	if checks < 2 {
		t.Errorf("ready checked %d times, want the first check and one after the write at least", checks)
	}
}

// watchDir fails on a directory that is not there: Launch then polls.
func TestWatchDirOfNoDir(t *testing.T) {
	if dw, err := watchDir(filepath.Join(t.TempDir(), "gone")); err == nil {
		dw.Close()
		t.Fatal("watchDir of a missing dir succeeded")
	}
}
