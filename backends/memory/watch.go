package memory

import (
	"context"
	"fmt"

	"github.com/metaplane/metaplane/core"
)

// watchBatch bounds how many revisions a watch collects under the lock at
// once.
const watchBatch = 256

// Watch delivers the changes at or below prefix from fromRevision on (0:
// from the next change), one response per revision that touched the
// prefix, from the store's exact history. A fromRevision older than the
// history fails at once with ErrCompacted; a consumer that falls behind the
// history's retention gets a final ErrCompacted response. The writer never
// waits for a watch. The channel is closed when ctx ends, when the client
// closes, or after a response with Err. Errors: ErrInvalidPath,
// ErrInvalidArgument (negative revision), ErrCompacted, ErrClosed, context
// errors.
func (b *Backend) Watch(ctx context.Context, prefix string, fromRevision int64) (<-chan core.WatchResponse, error) {
	if err := b.begin(ctx); err != nil {
		return nil, err
	}
	if err := core.ValidatePath(prefix); err != nil {
		return nil, err
	}
	if fromRevision < 0 {
		return nil, fmt.Errorf("%w: watch from revision %d", core.ErrInvalidArgument, fromRevision)
	}
	if err := b.lock(); err != nil {
		return nil, err
	}
	s := b.s
	next := fromRevision
	if next == 0 {
		next = s.rev + 1
	}
	if next <= s.compacted {
		c := s.compacted
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: watch from revision %d, history starts at %d", core.ErrCompacted, fromRevision, c+1)
	}
	ch := make(chan core.WatchResponse, 64)
	s.wg.Add(1) // under the lock: the store's Close cannot be waiting yet
	s.mu.Unlock()
	go b.runWatch(ctx, prefix, next, ch)
	return ch, nil
}

func (b *Backend) runWatch(ctx context.Context, prefix string, next int64, ch chan core.WatchResponse) {
	s := b.s
	defer s.wg.Done()
	defer close(ch)
	send := func(r core.WatchResponse) bool {
		select {
		case ch <- r:
			return true
		case <-ctx.Done():
		case <-b.done:
		}
		return false
	}
	for {
		s.mu.Lock()
		for {
			if b.closed {
				s.mu.Unlock()
				return
			}
			if next <= s.compacted {
				c := s.compacted
				s.mu.Unlock()
				send(core.WatchResponse{Revision: next - 1, Err: fmt.Errorf("%w: watch fell behind: revision %d is gone, history starts at %d", core.ErrCompacted, next, c+1)})
				return
			}
			if next <= s.rev {
				break
			}
			changed := s.changed
			s.mu.Unlock()
			select {
			case <-changed:
			case <-ctx.Done():
				return
			case <-b.done:
				return
			}
			s.mu.Lock()
		}
		var out []core.WatchResponse
		for n := 0; next <= s.rev && n < watchBatch; n++ {
			e := s.history[next-s.compacted-1]
			next++
			var evs []core.WatchEvent
			for _, ev := range e.events {
				if core.HasPrefixPath(ev.Path, prefix) {
					ev.Data = cloneBytes(ev.Data)
					evs = append(evs, ev)
				}
			}
			if len(evs) > 0 {
				out = append(out, core.WatchResponse{Events: evs, Revision: e.rev})
			}
		}
		s.mu.Unlock()
		for _, r := range out {
			if !send(r) {
				return
			}
		}
	}
}
