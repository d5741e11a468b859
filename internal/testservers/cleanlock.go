package testservers

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// CleanAlone makes the calling test the only one, across the test binaries
// `go test ./...` runs at once, that cleans the shared servers: clean takes
// every dead run's objects by design, so two tests that each plant a "killed"
// run and clean would take each other's. An flock on a file in the temp dir,
// held until the test ends.
func CleanAlone(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "outboxdrill-clean-tests.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}
