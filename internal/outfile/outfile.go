// Package outfile writes the files a command puts in a directory the user
// named (explore's and soak's --out). Such a directory may be shared (a
// /tmp/out anyone can write into), so a name in it may be a symlink someone
// planted to make the runner overwrite its target: a symlink is refused,
// never followed. And a file is whole or absent: written to a temp file in
// the same directory, synced, then renamed over the name, so a full disk
// or a crash leaves no empty or cut-short file that a replay would read.
package outfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Dir makes dir (and its parents) unless it is there; dir itself must not
// be a symlink (its parents may: /tmp may be one).
func Dir(dir string, perm fs.FileMode) error {
	if err := refuseLink(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	fi, err := os.Lstat(dir) // made now: a symlink swapped in meanwhile is refused too
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}

// Write puts data in path, whole or not at all: see the package comment.
func Write(path string, data []byte, perm fs.FileMode) (err error) {
	if err := refuseLink(path); err != nil {
		return err
	}
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file: refusing to write it", path)
	}
	// CreateTemp opens O_CREATE|O_EXCL: it makes a new file, never opens
	// one that is there (nor a symlink's target).
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if err := f.Sync(); err != nil { // a full disk may only say so here
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// rename replaces the name itself: a symlink planted since the check
	// above is replaced, its target untouched.
	return os.Rename(f.Name(), path)
}

// refuseLink is an error when path is a symlink.
func refuseLink(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(path)
		return fmt.Errorf("%s is a symbolic link (to %s): refusing to write through it", path, target)
	}
	return nil
}
