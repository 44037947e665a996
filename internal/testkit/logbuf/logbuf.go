// Package logbuf is a log destination for tests: a buffer that a slog
// handler may write from many goroutines at once, read back as a string
// (to check what was logged — or that no key ever was).
package logbuf

import (
	"bytes"
	"log/slog"
	"sync"
)

// Buffer collects log output. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Logger returns a text logger at level writing into b.
func (b *Buffer) Logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: level}))
}
