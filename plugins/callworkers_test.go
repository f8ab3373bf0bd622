package plugins

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Calls that follow each other run on the goroutine the first one started,
// a burst starts a goroutine for each call that finds no worker parked,
// and every worker ends once done is closed.
func TestCallWorkersReuseTheirGoroutines(t *testing.T) {
	done := make(chan struct{})
	w := newCallWorkers(done)

	ran := make(chan struct{})
	for i := 0; i < 100; i++ {
		w.run(func() { ran <- struct{}{} })
		<-ran
		waitParked(t, w, 1) // the worker is back before the next call
	}
	if got := w.started.Load(); got != 1 {
		t.Fatalf("100 calls one after the other started %d goroutines, want 1", got)
	}

	release := make(chan struct{})
	var inCall sync.WaitGroup
	inCall.Add(10)
	for i := 0; i < 10; i++ {
		w.run(func() { inCall.Done(); <-release })
	}
	inCall.Wait()
	if got := w.started.Load(); got != 10 {
		t.Fatalf("10 calls held at once with one worker parked: %d goroutines started in all, want 10", got)
	}
	close(release)
	waitParked(t, w, 10)
	close(done)
	w.wait() // returns only when every worker has ended
	if got := w.idle.Load(); got != 10 {
		t.Fatalf("parked count after the end: %d, want 10 (none took a call)", got)
	}
}

// More calls held at once than maxIdleCallWorkers leave at most that many
// goroutines parked when they return.
func TestCallWorkersParkAtMostTheirBound(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	w := newCallWorkers(done)
	n := maxIdleCallWorkers + 50
	release := make(chan struct{})
	var inCall, returned sync.WaitGroup
	inCall.Add(n)
	returned.Add(n)
	for i := 0; i < n; i++ {
		w.run(func() { inCall.Done(); <-release; returned.Done() })
	}
	inCall.Wait()
	close(release)
	returned.Wait()
	waitParked(t, w, maxIdleCallWorkers)
	running := func() int32 { return w.started.Load() - w.exited.Load() }
	for i := 0; running() > maxIdleCallWorkers; i++ {
		if i > 10_000_000 {
			t.Fatalf("%d workers still running after %d calls returned, want at most %d", running(), n, maxIdleCallWorkers)
		}
		runtime.Gosched()
	}
	if got := w.idle.Load(); got > maxIdleCallWorkers {
		t.Fatalf("%d workers parked, want at most %d", got, maxIdleCallWorkers)
	}
}

func waitParked(t *testing.T, w *callWorkers, n int32) {
	t.Helper()
	// A worker counts itself idle just before it blocks in its select: it
	// is parked once its goroutine is seen blocked there too (a call handed
	// over in between would start a new goroutine).
	for i := 0; w.idle.Load() < n || blockedWorkers(w) < int(n); i++ {
		if i > 100_000 {
			t.Fatalf("workers parked: %d counted, %d blocked; want %d", w.idle.Load(), blockedWorkers(w), n)
		}
		runtime.Gosched()
	}
}

// blockedWorkers counts the goroutines of w blocked in its loop's select
// (a goroutine's trace names its receiver's address).
func blockedWorkers(w *callWorkers) int {
	frame := fmt.Sprintf("(*callWorkers).loop(%p", w)
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, " [select]:") && strings.Contains(g, frame) {
			n++
		}
	}
	return n
}
