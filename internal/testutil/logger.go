package testutil

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Logger returns a logger writing to t.Log until the test ends; lines
// logged after that (by goroutines still winding down) are dropped, never a
// panic.
func Logger(t testing.TB) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(w.stop)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *tWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}
