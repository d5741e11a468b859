// Package guardfile is the one way the runner reads a file a user names:
// scenario files, system files, schema (SQL) files. A file is read only if
// it is a regular file (a FIFO would block the read forever, /dev/zero
// would fill memory, a directory is no text) and no larger than the cap of
// its kind, which is checked from stat, before a byte is read; the read
// runs under a context, so that Ctrl-C, SIGTERM and --timeout stop it
// whatever the file system does.
package guardfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Kind is a kind of file the runner reads, with its size cap.
type Kind struct {
	Name string // for messages: "a scenario file"
	Max  int64  // bytes
}

// The kinds of file the runner reads. A scenario or system file is a few
// kilobytes (the library's largest is under 3 KiB); decoding YAML costs
// several times the file in memory, so 4 MiB bounds a load to tens of MB.
// A schema file may be a pg_dump --schema-only of a real application
// (functions, comments, many tables: megabytes); 16 MiB leaves room for
// that while keeping a hostile file from costing more than the string
// PostgreSQL is sent.
var (
	Scenario = Kind{"a scenario file", 4 << 20}
	System   = Kind{"a system file", 4 << 20}
	SQL      = Kind{"a schema (SQL) file", 16 << 20}
)

// ErrNotRegular and ErrTooLarge are what Check and Read refuse (errors.Is).
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("over the size cap")
)

// Error is a file refused: its path and why.
type Error struct {
	Path string
	Msg  string // the whole message, path included
	Err  error  // ErrNotRegular, ErrTooLarge, an *fs.PathError's cause, a context's cause
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// open opens a file for Read and Check; a test replaces it to see that a
// refused file is never opened.
var open = func(path string) (*os.File, error) {
	// O_NONBLOCK: a FIFO put in the file's place after the stat opens at
	// once (without a writer, a plain open blocks); fstat then refuses it.
	// O_NOCTTY: a terminal device never becomes the controlling terminal.
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
}

// Check tells whether path could be read as a file of kind k, without
// reading it: it exists, is a regular file within the cap, and opens for
// reading (permissions). For validate, which checks what run will read.
func Check(path string, k Kind) error {
	f, err := openChecked(path, k)
	if err != nil {
		return err
	}
	return f.Close()
}

// Read reads the file at path, a file of kind k, under ctx: a cancelled
// ctx ends the wait at once (the read itself stops at its next chunk).
func Read(ctx context.Context, path string, k Kind) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, stopped(ctx, path)
	}
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := read(ctx, path, k)
		done <- result{data, err}
	}()
	select {
	case r := <-done:
		return r.data, r.err
	case <-ctx.Done():
		// A read stuck in the kernel (a hung network file system) is left
		// to finish on its own; the caller is free to go.
		return nil, stopped(ctx, path)
	}
}

// chunk is how much read takes between looks at ctx.
const chunk = 256 << 10

func read(ctx context.Context, path string, k Kind) ([]byte, error) {
	f, err := openChecked(path, k)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := int64(0)
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	// One byte more than the cap shows a file that grew past it.
	buf := make([]byte, 0, min(size, k.Max)+1)
	for {
		if ctx.Err() != nil {
			return nil, stopped(ctx, path)
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow: a file that grew since the stat
		}
		n, err := f.Read(buf[len(buf):min(cap(buf), len(buf)+chunk)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > k.Max {
			return nil, tooLarge(path, k, int64(len(buf)), true)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, pathError(path, err)
		}
	}
}

// openChecked stats path (no open: a device is refused before anything
// touches it), opens it without blocking, and checks the open file again
// (it may have been replaced in between).
func openChecked(path string, k Kind) (*os.File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, pathError(path, err)
	}
	if err := regular(path, fi, k); err != nil {
		return nil, err
	}
	f, err := open(path)
	if err != nil {
		return nil, pathError(path, err)
	}
	if fi, err = f.Stat(); err != nil {
		f.Close()
		return nil, pathError(path, err)
	}
	if err := regular(path, fi, k); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func regular(path string, fi fs.FileInfo, k Kind) error {
	if !fi.Mode().IsRegular() {
		return &Error{Path: path, Err: ErrNotRegular, Msg: fmt.Sprintf("%s is not a regular file (%s)", path, FileKind(fi.Mode()))}
	}
	if fi.Size() > k.Max {
		return tooLarge(path, k, fi.Size(), false)
	}
	return nil
}

func tooLarge(path string, k Kind, size int64, atLeast bool) error {
	is := fmt.Sprintf("is %s (%d bytes)", Size(size), size)
	if atLeast {
		is = "grew past " + Size(k.Max) + " while read"
	}
	return &Error{Path: path, Err: ErrTooLarge, Msg: fmt.Sprintf("%s %s: %s may be at most %s", path, is, k.Name, Size(k.Max))}
}

// pathError words an *fs.PathError as "path: cause" (not "open path:
// cause": which call failed says nothing to the user).
func pathError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &Error{Path: path, Err: err, Msg: fmt.Sprintf("%s: %v", path, err)}
}

func stopped(ctx context.Context, path string) error {
	cause := context.Cause(ctx)
	return &Error{Path: path, Err: cause, Msg: fmt.Sprintf("%s: not read: %v", path, cause)}
}

// FileKind names what a non-regular file is, for messages.
func FileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	case m.IsRegular():
		return "a regular file"
	}
	return "a special file (" + m.Type().String() + ")"
}

// Size is n bytes for a message: "512 bytes", "4 MiB", "100.0 MiB".
func Size(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}
