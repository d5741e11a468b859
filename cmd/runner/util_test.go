package main

import (
	"bytes"
	"fmt"
	"sync"
)

// syncBuffer is a bytes.Buffer safe for a child's writes and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func fmtSscan(s string, v any) (int, error) { return fmt.Sscan(s, v) }
