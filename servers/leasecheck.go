package servers

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/lazy"
)

// What `clean` trusts. A temp root (/tmp, /dev/shm) is writable by every
// user, and clean may run as root: a lease file or a dir named like the
// runner's is only a claim. So clean acts on a lease only when this user's
// runner provably wrote it, and on a dir only when this user's runner
// provably made it:
//
//   - Leases live in a directory only this user can write: the temp root
//     itself when it is this user's and mode 0700 ($TMPDIR set to a private
//     dir, a test's t.TempDir), else .drill-leases-UID in it, which the
//     runner makes with mode 0700 and clean accepts only as a real
//     directory (not a symlink) of this user with that mode.
//   - A lease file is a regular file (not a symlink: opened O_NOFOLLOW, and
//     the file opened is the one checked) of this user, mode 0600.
//   - A process is killed only while its start time is the one recorded
//     and it carries a token of the lease in its environment; tokens hold
//     a random secret written in the lease (unreadable by other users, as
//     /proc/PID/environ is), so no other user can name one.
//   - A dir is a real directory, mode 0700 (what os.MkdirTemp makes), of
//     this user or of the system user the runner hands that kind of
//     server's dir to when it runs as root (PostgreSQL and RabbitMQ refuse
//     root), with the exact name the runner gives.

// leaseDirName is the private lease directory in a shared temp root.
func leaseDirName() string { return ".drill-leases-" + strconv.Itoa(os.Geteuid()) }

// privateDir is why fi is not a directory this user alone may write (its
// own, mode 0700, not a symlink), "" when it is.
func privateDir(fi fs.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return "a symbolic link"
	case !fi.IsDir():
		return "not a directory"
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Sprintf("owned by uid %d, not this user", ownerOf(fi))
	case fi.Mode().Perm() != 0o700:
		return fmt.Sprintf("mode %04o, not 0700", fi.Mode().Perm())
	}
	return ""
}

func ownerOf(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// leaseDir is where this user's leases in root live; create makes it (a
// runner), else ("" with no error) it may not exist (clean). A path there
// that is not this user's private directory is an error: never used.
func leaseDir(root string, create bool) (string, error) {
	if fi, err := os.Lstat(root); err == nil && privateDir(fi) == "" {
		return root, nil
	}
	dir := filepath.Join(root, leaseDirName())
	if create {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) && !create {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if why := privateDir(fi); why != "" {
		return "", fmt.Errorf("%s is %s: not made by this user's runner, left alone", dir, why)
	}
	return dir, nil
}

// leaseFile is why fi is not a lease file this user's runner wrote, ""
// when it is.
func leaseFile(fi fs.FileInfo) string {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return "a symbolic link"
	case !fi.Mode().IsRegular():
		return "not a regular file"
	case ownerOf(fi) != os.Geteuid():
		return fmt.Sprintf("owned by uid %d, not this user", ownerOf(fi))
	case fi.Mode().Perm() != 0o600:
		return fmt.Sprintf("mode %04o, not 0600", fi.Mode().Perm())
	}
	return ""
}

// openLease opens the lease file at path if this user's runner wrote it:
// checked on the file opened (O_NOFOLLOW, then fstat), so a file swapped
// in between is never read. A refusal says why.
func openLease(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, refused{path + " is a symbolic link: not a lease this user's runner wrote, left alone"}
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		if why := leaseFile(fi); why != "" {
			err = refused{fmt.Sprintf("%s is %s: not a lease this user's runner wrote, left alone", path, why)}
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// legacyDirName is a managed dir's name from a runner before leases:
// drill-KIND- and os.MkdirTemp's random digits, nothing else.
var legacyDirName = lazy.Regexp(`^drill-([a-z][a-z0-9]*)-[0-9]+$`)

// madeDir is why the dir at path (of kind) is not one this user's runner
// made, "" when it is: see the top of this file.
func madeDir(path, kind string) string {
	fi, err := os.Lstat(path)
	if err != nil {
		return err.Error()
	}
	why := privateDir(fi)
	if why == "" || fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		return why
	}
	for _, uid := range handedTo(kind) { // a root runner's server dir, chowned
		if ownerOf(fi) == uid {
			return ""
		}
	}
	return why
}

// handedTo are the users a root runner hands a kind's dir to (none when
// not root): those it runs that server as.
func handedTo(kind string) []int {
	if os.Geteuid() != 0 {
		return nil
	}
	cred := postgresCredential
	if kind != PostgresDir {
		kinds := broker.Kinds()
		i := slices.IndexFunc(kinds, func(k *broker.Kind) bool { return k.Dir == kind && k.DirOwner != nil })
		if i < 0 {
			return nil
		}
		cred = kinds[i].DirOwner
	}
	if c, err := cred(); err == nil && c != nil {
		return []int{int(c.Uid)}
	}
	return nil
}
