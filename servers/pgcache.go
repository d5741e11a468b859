package servers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The initialised data directory (initdb's output, before any server ran) is
// the same for every run with the same binaries and initdb arguments, and
// initdb is most of a cold start (~0.8–1.7 s here). So it is kept once under
// the user cache dir and copied for each new server (~0.1 s).

// cacheDir is where the initdb output for these binaries is kept, or "" when
// there is no user cache dir.
func cacheDir(binDir string) string {
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
	return filepath.Join(base, "outboxdrill", "pgdata-"+hex.EncodeToString(h.Sum(nil))[:16])
}

// restoreCache copies the cached data dir to dst; false when there is none.
func restoreCache(cache, dst string) bool {
	if cache == "" {
		return false
	}
	if _, err := os.Stat(filepath.Join(cache, "PG_VERSION")); err != nil {
		return false
	}
	if err := copyTree(cache, dst); err != nil {
		_ = os.RemoveAll(dst)
		return false
	}
	return true
}

// saveCache keeps a copy of a fresh data dir. Best effort: a run that cannot
// write its cache still runs. Written aside, then renamed, so a concurrent
// run never copies half a cache.
func saveCache(src, cache string) {
	if cache == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(cache), 0o755); err != nil {
		return
	}
	tmp, err := os.MkdirTemp(filepath.Dir(cache), ".tmp-pgdata-*")
	if err != nil {
		return
	}
	if err := copyTree(src, filepath.Join(tmp, "d")); err != nil || os.Rename(filepath.Join(tmp, "d"), cache) != nil {
		// Another run may have won the rename: its cache is as good as ours.
		_ = os.RemoveAll(tmp)
		return
	}
	_ = os.RemoveAll(tmp)
}

// copyTree copies a directory of plain files and directories, keeping modes
// (PostgreSQL insists on 0700 for its data dir).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm())
		case info.Mode().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		}
		return fmt.Errorf("%s: not a plain file", path)
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
