package outfile

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWriteRefusesSymlinks (issue 41, M7): a symlink planted under the
// name is refused, its target untouched; so is an out dir that is one.
func TestWriteRefusesSymlinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "random-seed-1.schedule")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	err := Write(link, []byte("overwritten"), 0o644)
	if err == nil || !strings.Contains(err.Error(), link+" is a symbolic link (to "+victim+"): refusing to write through it") {
		t.Errorf("write through a symlink: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("the symlink's target was overwritten: %q", b)
	}
	out := filepath.Join(dir, "out")
	if err := os.Symlink(filepath.Dir(victim), out); err != nil {
		t.Fatal(err)
	}
	if err := Dir(out, 0o755); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("an out dir that is a symlink: %v", err)
	}
	// A plain file is replaced whole, with its mode, and no temp file stays.
	plain := filepath.Join(dir, "finding.yaml")
	if err := os.WriteFile(plain, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(plain, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(plain); string(b) != "new" {
		t.Errorf("replaced: %q", b)
	}
	if fi, _ := os.Stat(plain); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", fi.Mode())
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(tmp) > 0 {
		t.Errorf("temp files left: %v", tmp)
	}
}

// TestWriteOnAFullDisk (issue 41, L4): a full disk is an error naming the
// file, and leaves neither it (0 bytes, or cut short) nor a temp file.
func TestWriteOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a 64 KiB tmpfs as the full disk")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	path := filepath.Join(dir, "random-seed-1.schedule")
	err := Write(path, make([]byte, 256<<10), 0o644)
	if err == nil || !strings.Contains(err.Error(), "write "+path+": ") || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("a full disk: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		t.Errorf("left %s on the full disk", ents[0].Name())
	}
}
