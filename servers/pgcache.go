package servers

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The initialised data directory (initdb's output, before any server ran) is
// the same for every run with the same binaries and initdb arguments, and
// initdb is most of a cold start (~0.7–1.7 s here). So it is kept once under
// the user cache dir and unpacked for each new server. It is kept as one tar
// file, not as a tree: writing ~1,000 files to a disk costs ~1 ms each when
// other processes' fsyncs keep its journal busy, one file a few ms; and
// reading it back is one open instead of a thousand.

// cacheFile is where the initdb output for these binaries is kept, or ""
// when there is no user cache dir.
func cacheFile(binDir string) string {
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	h := sha256.New()
	fmt.Fprintln(h, binDir, strings.Join(initdbArgs, " "))
	// The binary's size and time tell an upgrade in place from the old one.
	if fi, err := os.Stat(filepath.Join(binDir, "postgres")); err == nil {
		fmt.Fprintln(h, fi.Size(), fi.ModTime().UnixNano())
	}
	return filepath.Join(base, "outboxdrill", "pgdata-"+hex.EncodeToString(h.Sum(nil))[:16]+".tar")
}

// restoreCache unpacks the cached data dir into dst, owned by uid:gid (-1:
// ours); false when there is none or it cannot be read, and then dst does
// not exist.
func restoreCache(cache, dst string, uid, gid int) bool {
	if cache == "" {
		return false
	}
	f, err := os.Open(cache)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := untar(tar.NewReader(f), dst, uid, gid); err != nil {
		_ = os.RemoveAll(dst)
		return false
	}
	return true
}

// saveCache keeps a copy of a fresh data dir. Best effort: a run that cannot
// write its cache still runs. Written aside, then renamed, so a concurrent
// run never reads half a cache (and two that both save both write a whole).
func saveCache(src, cache string) {
	if cache == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(cache), 0o755); err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(cache), ".tmp-pgdata-*")
	if err != nil {
		return
	}
	err = writeTar(tmp, src)
	if err = errors.Join(err, tmp.Close()); err == nil {
		err = os.Rename(tmp.Name(), cache)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return
	}
	// The cache of the same binaries as a tree, as earlier versions kept it.
	_ = os.RemoveAll(strings.TrimSuffix(cache, ".tar"))
}

// writeTar archives the plain files and directories under src, with their
// modes (PostgreSQL insists on 0700 for its data dir).
func writeTar(w io.Writer, src string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !d.IsDir() && !info.Mode().IsRegular() {
			return fmt.Errorf("%s: not a plain file", path)
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(info.Mode().Perm()), Typeflag: tar.TypeReg, Size: info.Size()}
		if d.IsDir() {
			hdr.Typeflag, hdr.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(hdr); err != nil || d.IsDir() {
			return err
		}
		return copyFileTo(tw, path)
	})
	return errors.Join(err, tw.Close())
}

func copyFileTo(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// untarBuf is the copy buffer of untar: as large as the largest file of a
// cluster (a 1 MB WAL segment), so each file is one read and one write.
const untarBuf = 1 << 20

// untar unpacks what writeTar wrote into dst (which must not exist), giving
// every file to uid:gid unless they are -1.
func untar(tr *tar.Reader, dst string, uid, gid int) error {
	buf := make([]byte, untarBuf)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(hdr.Name) && hdr.Name != "." {
			return fmt.Errorf("cache entry %q outside the data dir", hdr.Name)
		}
		target := filepath.Join(dst, filepath.FromSlash(hdr.Name))
		mode := fs.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.Mkdir(target, mode)
			if err == nil && uid >= 0 {
				err = os.Lchown(target, uid, gid)
			}
		case tar.TypeReg:
			err = writeFile(target, mode, tr, buf, uid, gid)
		default:
			err = fmt.Errorf("cache entry %q: not a plain file", hdr.Name)
		}
		if err != nil {
			return err
		}
	}
}

// writeFile creates path with what r holds, copied through buf, and gives
// it to uid:gid unless they are -1. Not io.Copy: that gives every file a
// 32 kB buffer of its own (*os.File.ReadFrom), and collecting a thousand of
// them costs more CPU than the copying. Plain syscalls, not *os.File: that
// saves trying to register each file with the poller, and a path lookup
// for the chown (~20 % of the unpacking). An EINTR from open here only costs
// the cache: restoreCache then falls back to initdb.
func writeFile(path string, mode fs.FileMode, r io.Reader, buf []byte, uid, gid int) (err error) {
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, uint32(mode))
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer func() {
		if cerr := syscall.Close(fd); cerr != nil {
			err = errors.Join(err, &fs.PathError{Op: "close", Path: path, Err: cerr})
		}
	}()
	if uid >= 0 {
		if err := syscall.Fchown(fd, uid, gid); err != nil {
			return &fs.PathError{Op: "chown", Path: path, Err: err}
		}
	}
	if _, err := io.CopyBuffer(fdWriter(fd), r, buf); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// fdWriter writes to a file descriptor, all of p or an error.
type fdWriter int

func (fd fdWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := syscall.Write(int(fd), p[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.ErrShortWrite
		}
		n += m
	}
	return n, nil
}
