package guardfile

import (
	"context"
	"errors"
	"github.com/outboxdrill/runner/internal/testutil"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// noOpen fails the test if a file is opened: a refused file is refused from
// its stat alone.
func noOpen(t *testing.T) {
	t.Helper()
	orig := open
	open = func(path string) (*os.File, error) {
		t.Errorf("%s was opened", path)
		return orig(path)
	}
	t.Cleanup(func() { open = orig })
}

func TestReadsARegularFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.yaml")
	if err := os.WriteFile(p, []byte("name: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := Read(context.Background(), p, Scenario)
	if err != nil || string(b) != "name: a\n" {
		t.Fatalf("Read: %q, %v", b, err)
	}
	if err := Check(p, Scenario); err != nil {
		t.Fatalf("Check: %v", err)
	}
	// A symlink to a regular file is that file.
	l := filepath.Join(t.TempDir(), "l.yaml")
	if err := os.Symlink(p, l); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(context.Background(), l, Scenario); err != nil || string(b) != "name: a\n" {
		t.Fatalf("Read through a symlink: %q, %v", b, err)
	}
	empty := filepath.Join(t.TempDir(), "empty.sql")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(context.Background(), empty, SQL); err != nil || len(b) != 0 {
		t.Fatalf("Read an empty file: %q, %v", b, err)
	}
}

// A FIFO, /dev/zero and a directory are refused at once, never opened,
// each named for what it is.
func TestRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.sql")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{fifo, fifo + " is not a regular file (a FIFO)"},
		{"/dev/zero", "/dev/zero is not a regular file (a character device)"},
		{dir, dir + " is not a regular file (a directory)"},
	} {
		noOpen(t)
		testutil.Within(t, 2*time.Second, "the read", func() {
			_, err := Read(context.Background(), c.path, SQL)
			if err == nil || err.Error() != c.want || !errors.Is(err, ErrNotRegular) {
				t.Errorf("Read %s: %v; want %q", c.path, err, c.want)
			}
			if err := Check(c.path, SQL); err == nil || err.Error() != c.want {
				t.Errorf("Check %s: %v; want %q", c.path, err, c.want)
			}
		})
	}
	missing := filepath.Join(dir, "nope.sql")
	if _, err := Read(context.Background(), missing, SQL); err == nil || err.Error() != missing+": no such file or directory" || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}

// A FIFO put in the place of the file after its stat is opened without
// blocking and refused by the second look.
func TestFIFOSwappedInAfterTheStat(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	reg := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(reg, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	orig := open
	open = func(string) (*os.File, error) { return orig(fifo) } // the stat saw a.yaml
	t.Cleanup(func() { open = orig })
	testutil.Within(t, 2*time.Second, "the read", func() {
		if _, err := Read(context.Background(), reg, Scenario); err == nil || !errors.Is(err, ErrNotRegular) {
			t.Errorf("want the FIFO refused, got %v", err)
		}
	})
}

// A file over its kind's cap is refused from its stat: a 100 MiB file
// (sparse: no disk) costs no memory.
func TestSizeCap(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.yaml")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(100 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	noOpen(t)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = Read(context.Background(), p, Scenario)
	runtime.ReadMemStats(&after)
	want := p + " is 100 MiB (104857600 bytes): a scenario file may be at most 4 MiB"
	if err == nil || err.Error() != want || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want %q", err, want)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("refusing it allocated %d bytes", grew)
	}
	// At the cap is fine; one byte over is not.
	if err := os.Truncate(p, Scenario.Max); err != nil {
		t.Fatal(err)
	}
	open = os.Open
	if b, err := Read(context.Background(), p, Scenario); err != nil || len(b) != int(Scenario.Max) {
		t.Fatalf("at the cap: %d bytes, %v", len(b), err)
	}
	if err := os.Truncate(p, Scenario.Max+1); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(context.Background(), p, Scenario); err == nil || !strings.Contains(err.Error(), "is 4.0 MiB (4194305 bytes): a scenario file may be at most 4 MiB") {
		t.Fatalf("one byte over: %v", err)
	}
}

// A cancelled context ends Read at once, even when the file system does
// not answer (here: an open that never returns).
func TestReadUnderContext(t *testing.T) {
	reg := filepath.Join(t.TempDir(), "a.sql")
	if err := os.WriteFile(reg, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	orig := open
	stuck := make(chan struct{})
	open = func(string) (*os.File, error) {
		<-stuck // a hung file system
		return orig(reg)
	}
	defer func() { close(stuck); open = orig }()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	testutil.Within(t, 2*time.Second, "the read", func() {
		_, err := Read(ctx, reg, SQL)
		if want := reg + ": not read: context canceled"; err == nil || err.Error() != want || !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want %q", err, want)
		}
	})
	if _, err := Read(ctx, reg, SQL); !errors.Is(err, context.Canceled) {
		t.Errorf("an already cancelled context: %v", err)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{12: "12 bytes", 4 << 10: "4 KiB", 1536: "1.5 KiB", 4 << 20: "4 MiB", 100<<20 + 1: "100.0 MiB", 2 << 30: "2 GiB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
