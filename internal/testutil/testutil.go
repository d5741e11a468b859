// Package testutil holds small helpers the tests of several packages share.
package testutil

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that goroutines (a child process's output
// copier, parallel scenarios) may write while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
