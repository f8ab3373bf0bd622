package plugins

import (
	"sync"
	"sync/atomic"
)

// maxIdleCallWorkers bounds the goroutines a stream keeps parked between
// calls: a burst above it runs on goroutines that end with their call.
const maxIdleCallWorkers = 256

// callWorkers runs the calls of one TxnStream on goroutines it keeps for
// the stream's lifetime. A call's path into a backend is deep (a Raft
// write goes through Dragonboat's proposal and waits there), so a
// goroutine started per call grows its stack again on every call: under
// 64 writers the stack copies (runtime.morestack) were 8% of a Raft
// leader's CPU. A kept goroutine has its stack grown already.
type callWorkers struct {
	work chan func()
	done <-chan struct{}
	idle atomic.Int32
	wg   sync.WaitGroup

	started, exited atomic.Int32 // goroutines started and ended (tests)
}

func newCallWorkers(done <-chan struct{}) *callWorkers {
	return &callWorkers{work: make(chan func()), done: done}
}

// run runs f on a parked worker, or on a new one when none is waiting.
func (w *callWorkers) run(f func()) {
	select {
	case w.work <- f:
	default:
		w.wg.Add(1)
		w.started.Add(1)
		go w.loop(f)
	}
}

func (w *callWorkers) loop(f func()) {
	defer w.wg.Done()
	defer w.exited.Add(1)
	for {
		f()
		if w.idle.Add(1) > maxIdleCallWorkers {
			w.idle.Add(-1)
			return
		}
		select {
		case f = <-w.work:
			w.idle.Add(-1)
		case <-w.done:
			return
		}
	}
}

// wait returns when every worker has ended (after done is closed and the
// calls they run have returned).
func (w *callWorkers) wait() { w.wg.Wait() }
