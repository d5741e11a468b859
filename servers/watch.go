package servers

import (
	"os"
	"path/filepath"
	"syscall"
)

// dirWatch tells of changes to the files of one directory (inotify): a
// file created, written, closed after writing or moved there. Launch's
// readiness check runs on each, rather than every millisecond: PostgreSQL
// takes 100–300 ms to write "ready" into its pid file, and polling it meant
// ~200 reads on the CPUs it was starting on.
type dirWatch struct {
	f *os.File
	// C gets a value after each change (coalesced: it holds one at most).
	C chan struct{}
}

// watchDir watches dir until Close; an error when the kernel will not
// (no inotify, the user's watches used up, no such dir): the caller polls.
func watchDir(dir string) (*dirWatch, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	const changes = syscall.IN_CREATE | syscall.IN_MODIFY | syscall.IN_CLOSE_WRITE | syscall.IN_MOVED_TO
	if _, err := syscall.InotifyAddWatch(fd, filepath.Clean(dir), changes); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("inotify_add_watch", err)
	}
	// Non-blocking: the runtime's poller waits for it, and Close ends a
	// Read in progress.
	w := &dirWatch{f: os.NewFile(uintptr(fd), "inotify "+dir), C: make(chan struct{}, 1)}
	go w.run()
	return w, nil
}

// run signals C after every read of events, until Close. Which file
// changed is not looked at: a spurious check costs one read of the file.
func (w *dirWatch) run() {
	buf := make([]byte, 4096)
	for {
		if _, err := w.f.Read(buf); err != nil {
			return // closed
		}
		select {
		case w.C <- struct{}{}:
		default:
		}
	}
}

// Close stops the watch.
func (w *dirWatch) Close() { w.f.Close() }
