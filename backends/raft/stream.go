package raft

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/metaplane/metaplane/core"
	raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"
)

// Streamed snapshots (core.SnapshotStreamer): a linearizable read opens a
// Pebble snapshot of the state machine's store, which the client then
// reads a page at a time and closes. A page is all the member holds (and,
// through the plugin, all it sends at once), whatever the tree's size; the
// Pebble snapshot keeps the store's files of that moment alive meanwhile.

// streamQuery asks the state machine for a streamed snapshot's handle.
type streamQuery struct{}

// streamHandle is an open streamed snapshot: the Pebble snapshot, the
// applied index it reflects, and the state machine's stop flag (set when
// it closes: the stream ends at its next page). done releases it.
type streamHandle struct {
	snap *pebble.Snapshot
	rev  int64
	stop *atomic.Bool
	done func()
}

// streams is the state machine's bookkeeping of its open streamed
// snapshots, so that Close ends them before it closes the store.
type streams struct {
	wg   sync.WaitGroup
	stop atomic.Bool
}

// streamCloseWait bounds how long Close waits for open streams to notice
// it (each does at its next page).
const streamCloseWait = 5 * time.Second

// openStream opens a streamed snapshot of db. The caller holds the state
// machine's read lock.
func (f *fsm) openStream(db *pebble.DB) (*streamHandle, error) {
	s := db.NewSnapshot()
	applied, err := readApplied(s)
	if err != nil {
		s.Close()
		return nil, err
	}
	f.streams.wg.Add(1)
	var once sync.Once
	return &streamHandle{snap: s, rev: int64(applied), stop: &f.streams.stop,
		done: func() { once.Do(func() { s.Close(); f.streams.wg.Done() }) }}, nil
}

// endStreams makes the open streams stop at their next page and waits
// (bounded) until they have released their snapshots.
func (f *fsm) endStreams() {
	f.streams.stop.Store(true)
	done := make(chan struct{})
	go func() { f.streams.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(streamCloseWait):
	}
}

// StreamSnapshot reads every node at or below prefix at one applied index
// (linearizable, as Snapshot), a page of about pageBytes at a time, from a
// snapshot of the store. See core.SnapshotStreamer.
func (c *Client) StreamSnapshot(ctx context.Context, prefix string, pageBytes int, fn func(rev int64, nodes []core.Node) error) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := core.ValidatePath(prefix); err != nil {
		return err
	}
	if pageBytes <= 0 {
		pageBytes = core.DefaultSnapshotPageBytes
	}
	v, err := c.m.read(ctx, streamQuery{}, false)
	if err != nil {
		return err
	}
	h := v.(*streamHandle)
	defer h.done()
	lo := nodeKey(prefix)
	it, err := h.snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return err
	}
	defer it.Close()
	var page []core.Node
	size, sent := 0, false
	flush := func() error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("raft: streamed snapshot: %w", err)
		}
		if h.stop.Load() {
			return errClosed
		}
		sent = true
		err := fn(h.rev, page)
		page, size = page[:0], 0
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		p := string(it.Key()[1:])
		if p == "/" || !core.HasPrefixPath(p, prefix) {
			continue // the root is left out, as Snapshot does
		}
		var n raftv1.NodeRecord
		if err := unmarshal(it.Value(), &n); err != nil {
			return err
		}
		// The iterator's buffers are reused: copy what the page keeps.
		node := core.Node{Path: p, Data: append([]byte(nil), n.GetData()...), Stat: coreStat(statOf(&n))}
		if len(page) > 0 && size+len(node.Path)+len(node.Data) > pageBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		page = append(page, node)
		size += len(node.Path) + len(node.Data)
	}
	if err := it.Error(); err != nil {
		return err
	}
	if len(page) > 0 || !sent {
		return flush()
	}
	return nil
}
