package servers

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A tree written by writeTar comes back from restoreCache as it was: every
// directory and file, their modes and contents (a 1 MB file among small
// ones, as a cluster's WAL segment is).
func TestCacheRoundTrip(t *testing.T) {
	src := filepath.Join(t.TempDir(), "data")
	want := map[string]string{
		"PG_VERSION":                  "15\n",
		"base/1/1255":                 strings.Repeat("a", 8192),
		"base/1/PG_VERSION":           "15\n",
		"base/5/empty":                "",
		"pg_wal/000000010001":         strings.Repeat("w", 1<<20),
		"global/pg_control":           "control",
		"pg_wal/archive_status/.keep": "k",
	}
	for name, body := range want {
		path := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(src, "pg_tblspc"), 0o700); err != nil { // an empty dir
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "cache.tar")
	saveCache(src, cache)
	dst := filepath.Join(t.TempDir(), "restored")
	if !restoreCache(cache, dst, -1, -1) {
		t.Fatal("restoreCache failed")
	}
	if got, wantTree := listTree(t, dst), listTree(t, src); got != wantTree {
		t.Errorf("restored tree:\n%s\nwant:\n%s", got, wantTree)
	}
	for name, body := range want {
		b, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || !bytes.Equal(b, []byte(body)) {
			t.Errorf("%s: %d bytes (%v), want %d", name, len(b), err, len(body))
		}
	}
}

// A cache cut short restores nothing: restoreCache says so and leaves no dir
// (the start then runs initdb).
func TestCacheCutShort(t *testing.T) {
	src := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(src, "base"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "base", "big"), bytes.Repeat([]byte("x"), 100000), 0o600); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "cache.tar")
	saveCache(src, cache)
	b, err := os.ReadFile(cache)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cache, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	if restoreCache(cache, dst, -1, -1) {
		t.Fatal("restoreCache of half an archive succeeded")
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Errorf("%s left behind (%v)", dst, err)
	}
}

// listTree lists every entry under root with its mode and size, one a line.
func listTree(t *testing.T, root string) string {
	var b strings.Builder
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		size := info.Size()
		if d.IsDir() {
			size = 0
		}
		b.WriteString(rel + " " + info.Mode().String() + " " + strconv.FormatInt(size, 10) + "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// BenchmarkRestoreCache unpacks this machine's cached cluster (~1,000
// files, ~30 MB) where a managed PostgreSQL's dir goes (MakeDir). Measured
// against the streaming untar with its one reused buffer, on this kind of
// VM: the archive mapped (MAP_POPULATE) and written from the mapping by
// two goroutines took 90-140 ms against 60-75 ms, read whole 200 ms: page
// mapping and faults cost more here than the copy they save.
func BenchmarkRestoreCache(b *testing.B) {
	bin, err := findPostgresBin("")
	if err != nil {
		b.Skip(err)
	}
	cache := cacheFile(bin)
	if _, err := os.Stat(cache); err != nil {
		b.Skipf("no cache yet (a managed start fills it): %v", err)
	}
	for b.Loop() {
		b.StopTimer()
		dir, err := MakeDir(PostgresDir)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if !restoreCache(cache, filepath.Join(dir, "data"), -1, -1) {
			b.Fatal("restoreCache failed")
		}
		b.StopTimer()
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		dropDir(dir)
		b.StartTimer()
	}
}
