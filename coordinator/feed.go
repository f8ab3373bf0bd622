package coordinator

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/metaplane/metaplane/core"
)

// DefaultMetadataStreamFeed is how many change events a coordinator keeps
// in memory for the metadata stream (Options.MetadataStreamFeed).
const DefaultMetadataStreamFeed = 20000

// changeFeed is the tail of one backend client's change log, kept in
// memory by one watch, from which every FetchMetadata long poll is served
// (instead of each opening a watch across the plugin): a poll waits on one
// channel and copies a slice. It holds every event with a revision above
// base, up to upTo: at least the last max events (whole revisions), at
// most a quarter more before the oldest are dropped.
type changeFeed struct {
	b      core.MetadataBackend
	max    int
	cancel context.CancelFunc

	mu     sync.Mutex
	base   int64 // every event with a revision > base is held
	upTo   int64 // the watch has delivered everything up to this revision
	events []core.WatchEvent
	wake   chan struct{} // closed when upTo moves or the feed ends
	err    error         // why the feed ended; nil while it runs
}

// startFeed opens a watch of b from revision from and returns the feed it
// fills. Errors: the watch's (ErrCompacted when from is gone).
func startFeed(b core.MetadataBackend, from int64, max int) (*changeFeed, error) {
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := b.Watch(ctx, "/", from)
	if err != nil {
		cancel()
		return nil, err
	}
	f := &changeFeed{b: b, max: max, cancel: cancel, base: from - 1, upTo: from - 1, wake: make(chan struct{})}
	go f.run(ch)
	return f, nil
}

func (f *changeFeed) run(ch <-chan core.WatchResponse) {
	for resp := range ch {
		f.mu.Lock()
		if resp.Err != nil {
			f.endLocked(resp.Err)
			f.mu.Unlock()
			f.cancel()
			for range ch {
			}
			return
		}
		f.events = append(f.events, resp.Events...)
		if resp.Revision > f.upTo {
			f.upTo = resp.Revision
		}
		if len(f.events) > f.max+f.max/4 {
			f.trimLocked() // in steps of a quarter, not a copy per response
		}
		close(f.wake)
		f.wake = make(chan struct{})
		f.mu.Unlock()
	}
	f.mu.Lock()
	f.endLocked(fmt.Errorf("%w: the metadata feed's watch ended", core.ErrClosed))
	f.mu.Unlock()
}

// trimLocked drops the oldest events, whole revisions, down to max.
func (f *changeFeed) trimLocked() {
	k := len(f.events) - f.max
	for k < len(f.events) && f.events[k].Revision == f.events[k-1].Revision {
		k++
	}
	f.base = f.events[k-1].Revision
	f.events = append([]core.WatchEvent(nil), f.events[k:]...)
}

func (f *changeFeed) endLocked(err error) {
	if f.err == nil {
		f.err = err
		close(f.wake)
	}
}

func (f *changeFeed) stop() {
	f.cancel()
}

// ended reports whether the feed stopped.
func (f *changeFeed) ended() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err != nil
}

// feedAnswer is a long poll's outcome: the events from the requested
// revision on (whole revisions, at most max unless one revision has more),
// the revision to fetch on from, and how far the feed has applied.
type feedAnswer struct {
	events  []core.WatchEvent
	next    int64
	applied int64
}

// fetch serves a long poll from revision from, waiting up to wait for an
// event. ok is false when the feed cannot answer it: from is older than
// what it holds, or the feed ended (the caller opens a watch of its own).
func (f *changeFeed) fetch(ctx context.Context, from int64, wait time.Duration, max int) (feedAnswer, bool) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		f.mu.Lock()
		if f.err != nil || from <= f.base {
			f.mu.Unlock()
			return feedAnswer{}, false
		}
		if f.upTo >= from {
			a := f.answerLocked(from, max)
			f.mu.Unlock()
			return a, true
		}
		wake, applied := f.wake, f.upTo
		f.mu.Unlock()
		select {
		case <-wake:
		case <-timer.C:
			return feedAnswer{next: from, applied: applied}, true
		case <-ctx.Done():
			return feedAnswer{next: from, applied: applied}, true
		}
	}
}

func (f *changeFeed) answerLocked(from int64, max int) feedAnswer {
	i := sort.Search(len(f.events), func(i int) bool { return f.events[i].Revision >= from })
	a := feedAnswer{next: f.upTo + 1, applied: f.upTo}
	j := i
	for j < len(f.events) && j-i < max {
		j++
		for j < len(f.events) && f.events[j].Revision == f.events[j-1].Revision {
			j++ // whole revisions only
		}
	}
	if j < len(f.events) {
		a.next = f.events[j].Revision
	}
	a.events = append([]core.WatchEvent(nil), f.events[i:j]...)
	return a
}

// feedRetry is how long after a feed failed to start polls open their own
// watches before a feed is tried again.
const feedRetry = time.Second

// feedFor returns the running feed of b, starting one from revision from
// (or from what b has applied, when from is beyond it) when there is none
// (or it ended, or belongs to an older client). nil
// when feeds are off or the watch cannot start at from (the caller opens
// its own, which reports why).
func (s *Server) feedFor(b core.MetadataBackend, from int64) *changeFeed {
	if s.opts.MetadataStreamFeed < 0 {
		return nil
	}
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	if f := s.feed; f != nil && f.b == b && !f.ended() {
		return f
	}
	if s.feed != nil {
		s.feed.stop()
		s.feed = nil
	}
	if s.feedsStopped || time.Since(s.feedFailed) < feedRetry {
		return nil
	}
	// Not beyond what the backend has applied: a first poll from far
	// ahead must not leave every later poll below the feed.
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	st, err := b.Status(sctx)
	cancel()
	if err == nil && st.Revision >= 0 && st.Revision+1 < from {
		from = st.Revision + 1
	}
	if from < 1 {
		from = 1
	}
	f, err := startFeed(b, from, s.opts.MetadataStreamFeed)
	if err != nil {
		s.feedFailed = time.Now()
		return nil
	}
	s.feed = f
	return f
}

// stopFeeds stops the feed for good (Serve returns).
func (s *Server) stopFeeds() {
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	s.feedsStopped = true
	if s.feed != nil {
		s.feed.stop()
		s.feed = nil
	}
}
