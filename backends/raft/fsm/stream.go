package fsm

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Streamed snapshots (core.SnapshotStreamer): a linearizable read opens a
// Pebble snapshot of the state machine's store, which the client then
// reads a page at a time and closes. A page is all the member holds (and,
// through the plugin, all it sends at once), whatever the tree's size; the
// Pebble snapshot keeps the store's files of that moment alive meanwhile.

// streamQuery asks the state machine for a streamed snapshot's handle.
type StreamQuery struct{}

// streamHandle is an open streamed snapshot: the Pebble snapshot, the
// applied index it reflects, and the state machine's stop flag (set when
// it closes: the stream ends at its next page). done releases it.
type StreamHandle struct {
	Snap *pebble.Snapshot
	Rev  int64
	Stop *atomic.Bool
	Done func()
}

// streams is the state machine's bookkeeping of its open streamed
// snapshots, so that Close ends them before it closes the store.
type streams struct {
	wg   sync.WaitGroup
	Stop atomic.Bool
}

// streamCloseWait bounds how long Close waits for open streams to notice
// it (each does at its next page).
const streamCloseWait = 5 * time.Second

// openStream opens a streamed snapshot of db. The caller holds the state
// machine's read lock.
func (f *FSM) openStream(db *pebble.DB) (*StreamHandle, error) {
	s := db.NewSnapshot()
	applied, err := readApplied(s)
	if err != nil {
		s.Close()
		return nil, err
	}
	f.streams.wg.Add(1)
	var once sync.Once
	return &StreamHandle{Snap: s, Rev: int64(applied), Stop: &f.streams.Stop,
		Done: func() { once.Do(func() { s.Close(); f.streams.wg.Done() }) }}, nil
}

// endStreams makes the open streams stop at their next page and waits
// (bounded) until they have released their snapshots.
func (f *FSM) endStreams() {
	f.streams.Stop.Store(true)
	done := make(chan struct{})
	go func() { f.streams.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(streamCloseWait):
	}
}
