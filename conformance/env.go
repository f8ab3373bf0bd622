package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/metaplane/metaplane/core"
)

// base is the node every property works under, so that nodes a backend
// keeps for itself (ZooKeeper's /zookeeper) never get in the way.
const base = "/conformance"

// p returns the path of name under base.
func p(names ...string) string { return core.JoinPath(base, names...) }

// env is one property's run: its T, store, context and first client.
type env struct {
	t     T
	store Store
	ctx   context.Context
	h     Harness
	caps  core.Capabilities
	c0    core.MetadataBackend
	// wait bounds every wait for something another client, a session's
	// end or a watch must bring about: waitTimeout times the harness's
	// TimeScale.
	wait time.Duration
}

// client opens a new client with the harness's default session timeout.
func (e *env) client() core.MetadataBackend {
	e.t.Helper()
	c := e.store.NewClient(e.t, ClientOptions{})
	if c == nil {
		e.t.Fatalf("harness %q returned a nil client", e.h.Name)
	}
	return c
}

// clients opens n clients.
func (e *env) clients(n int) []core.MetadataBackend {
	e.t.Helper()
	cs := make([]core.MetadataBackend, n)
	for i := range cs {
		cs[i] = e.client()
	}
	return cs
}

func (e *env) maxValueSize() int {
	if e.caps.MaxValueSize > 0 {
		return e.caps.MaxValueSize
	}
	return core.DefaultMaxValueSize
}

// ok fails the property when err is not nil.
func (e *env) ok(err error, format string, args ...any) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: unexpected error: %v", fmt.Sprintf(format, args...), err)
	}
}

// is fails the property unless errors.Is(err, want).
func (e *env) is(err, want error, format string, args ...any) {
	e.t.Helper()
	if !errors.Is(err, want) {
		e.t.Fatalf("%s: got error %v, want %v", fmt.Sprintf(format, args...), err, want)
	}
}

func (e *env) create(c core.MetadataBackend, path string, data []byte, mode core.CreateMode) string {
	e.t.Helper()
	got, _, err := core.Create(e.ctx, c, path, data, core.CreateOptions{Mode: mode})
	e.ok(err, "create %s (%v)", path, mode)
	return got
}

func (e *env) get(c core.MetadataBackend, path string) core.Node {
	e.t.Helper()
	n, err := core.Get(e.ctx, c, path)
	e.ok(err, "get %s", path)
	return n
}

func (e *env) set(c core.MetadataBackend, path string, data []byte, version int64) core.Stat {
	e.t.Helper()
	st, err := core.Set(e.ctx, c, path, data, version, core.Fence{})
	e.ok(err, "set %s", path)
	return st
}

func (e *env) exists(c core.MetadataBackend, path string) bool {
	e.t.Helper()
	_, ok, err := core.Exists(e.ctx, c, path)
	e.ok(err, "exists %s", path)
	return ok
}

func (e *env) mustExist(c core.MetadataBackend, path string) {
	e.t.Helper()
	if !e.exists(c, path) {
		e.t.Fatalf("%s does not exist, want it to", path)
	}
}

func (e *env) mustNotExist(c core.MetadataBackend, path string) {
	e.t.Helper()
	if e.exists(c, path) {
		e.t.Fatalf("%s exists, want it gone", path)
	}
}

// data asserts path's data.
func (e *env) data(c core.MetadataBackend, path string, want []byte) core.Node {
	e.t.Helper()
	n := e.get(c, path)
	if !bytes.Equal(n.Data, want) {
		e.t.Fatalf("%s holds %q, want %q", path, n.Data, want)
	}
	return n
}

// eventually polls cond until it holds or waitTimeout passes.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(e.wait)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %v waiting for %s", e.wait, what)
		}
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("property context ended waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// gone waits until path no longer exists as seen by c.
func (e *env) gone(c core.MetadataBackend, path string) {
	e.t.Helper()
	e.eventually(path+" to disappear", func() bool {
		_, ok, err := core.Exists(e.ctx, c, path)
		return err == nil && !ok
	})
}

// expire expires c's session through the harness.
func (e *env) expire(c core.MetadataBackend) {
	e.t.Helper()
	e.store.ExpireSession(e.t, c)
}

// campaign campaigns and fails the property unless elected within
// waitTimeout.
func (e *env) campaign(c core.MetadataBackend, id string) core.Leadership {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, e.wait)
	defer cancel()
	l, err := c.Campaign(ctx, core.Candidate{ID: id, Address: "test://" + id})
	e.ok(err, "campaign of %s", id)
	return l
}

// lost waits until l's Lost channel is closed.
func (e *env) lost(l core.Leadership, what string) {
	e.t.Helper()
	select {
	case <-l.Lost():
	case <-time.After(e.wait):
		e.t.Fatalf("leadership (epoch %d) not lost %v after %s", l.Epoch(), e.wait, what)
	}
}

// notLost asserts l's Lost channel is open now.
func (e *env) notLost(l core.Leadership, what string) {
	e.t.Helper()
	select {
	case <-l.Lost():
		e.t.Fatalf("leadership (epoch %d) lost %s", l.Epoch(), what)
	default:
	}
}

// watch opens a watch that ends with the property.
func (e *env) watch(c core.MetadataBackend, prefix string, from int64) <-chan core.WatchResponse {
	e.t.Helper()
	ch, err := c.Watch(e.ctx, prefix, from)
	e.ok(err, "watch %s from %d", prefix, from)
	return ch
}

// nextEvents receives responses from ch until n events arrived, failing on
// an error response, a closed channel or waitTimeout.
func (e *env) nextEvents(ch <-chan core.WatchResponse, n int) []core.WatchEvent {
	e.t.Helper()
	var got []core.WatchEvent
	timeout := time.After(e.wait)
	for len(got) < n {
		select {
		case r, ok := <-ch:
			if !ok {
				e.t.Fatalf("watch closed after %d of %d events", len(got), n)
			}
			if r.Err != nil {
				e.t.Fatalf("watch ended with %v after %d of %d events", r.Err, len(got), n)
			}
			got = append(got, r.Events...)
		case <-timeout:
			e.t.Fatalf("got %d of %d watch events in %v: %s", len(got), n, e.wait, describeEvents(got))
		}
	}
	return got
}

func describeEvents(evs []core.WatchEvent) string {
	var b bytes.Buffer
	for i, ev := range evs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%v %s @%d", ev.Type, ev.Path, ev.Revision)
	}
	return "[" + b.String() + "]"
}

// sessionEvent waits for the next session event on ch.
func (e *env) sessionEvent(ch <-chan core.SessionEvent, what string) core.SessionEvent {
	e.t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			e.t.Fatalf("session events closed waiting for %s", what)
		}
		return ev
	case <-time.After(e.wait):
		e.t.Fatalf("no session event within %v waiting for %s", e.wait, what)
	}
	return core.SessionEvent{}
}

// parallel runs f(i) for i in [0, n) concurrently and waits for all.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

// follower mirrors the nodes under a prefix from a watch, the way a
// coordinator's image does: it starts from a snapshot, applies events and
// Reset responses, and on ErrCompacted takes a new snapshot and watches on
// from it.
type follower struct {
	e      *env
	c      core.MetadataBackend
	prefix string

	mu     sync.Mutex
	state  map[string][]byte
	rev    int64
	resets int // snapshots retaken after ErrCompacted, Resets received
	// pages holds a Reset that comes in pages until its last page (nil
	// when none is under way).
	pages map[string][]byte
	err   error
	done  chan struct{}
	// gate, when not nil, holds the follower back from reading its watch
	// until it is closed (a slow consumer).
	gate <-chan struct{}
}

func (e *env) follow(c core.MetadataBackend, prefix string) *follower {
	e.t.Helper()
	f := &follower{e: e, c: c, prefix: prefix, done: make(chan struct{})}
	ch := f.resync()
	go f.loop(ch)
	return f
}

// followLater is follow for a consumer that reads nothing from its watch
// until the returned function is called.
func (e *env) followLater(c core.MetadataBackend, prefix string) (*follower, func()) {
	e.t.Helper()
	gate := make(chan struct{})
	f := &follower{e: e, c: c, prefix: prefix, done: make(chan struct{}), gate: gate}
	ch := f.resync()
	go f.loop(ch)
	var once sync.Once
	return f, func() { once.Do(func() { close(gate) }) }
}

// resync takes a snapshot and opens a watch from just after it.
func (f *follower) resync() <-chan core.WatchResponse {
	e := f.e
	e.t.Helper()
	snap, err := f.c.Snapshot(e.ctx, f.prefix)
	e.ok(err, "snapshot %s", f.prefix)
	f.mu.Lock()
	f.state = map[string][]byte{}
	for _, n := range snap.Nodes {
		f.state[n.Path] = n.Data
	}
	f.rev = snap.Revision
	f.mu.Unlock()
	ch, err := f.c.Watch(e.ctx, f.prefix, snap.Revision+1)
	e.ok(err, "watch %s from %d", f.prefix, snap.Revision+1)
	return ch
}

func (f *follower) loop(ch <-chan core.WatchResponse) {
	defer close(f.done)
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-f.e.ctx.Done():
			return
		}
	}
	for {
		r, ok := <-ch
		if !ok {
			return
		}
		if errors.Is(r.Err, core.ErrCompacted) {
			snap, err := f.c.Snapshot(f.e.ctx, f.prefix)
			if err == nil {
				ch, err = f.c.Watch(f.e.ctx, f.prefix, snap.Revision+1)
			}
			f.mu.Lock()
			f.resets++
			if err != nil {
				f.err = err
				f.mu.Unlock()
				return
			}
			f.state = map[string][]byte{}
			for _, n := range snap.Nodes {
				f.state[n.Path] = n.Data
			}
			f.rev = snap.Revision
			f.mu.Unlock()
			continue
		}
		f.mu.Lock()
		if r.Err != nil {
			f.err = r.Err
			f.mu.Unlock()
			return
		}
		if r.Reset {
			if f.pages == nil {
				f.resets++
				f.pages = map[string][]byte{}
			}
			for _, ev := range r.Events {
				if ev.Type != core.EventDeleted {
					f.pages[ev.Path] = ev.Data
				}
			}
			if r.Partial {
				f.mu.Unlock()
				continue
			}
			f.state, f.pages = f.pages, nil
			if r.Revision > f.rev {
				f.rev = r.Revision
			}
			f.mu.Unlock()
			continue
		}
		for _, ev := range r.Events {
			switch ev.Type {
			case core.EventCreated, core.EventUpdated:
				f.state[ev.Path] = ev.Data
			case core.EventDeleted:
				delete(f.state, ev.Path)
			}
		}
		if r.Revision > f.rev {
			f.rev = r.Revision
		}
		f.mu.Unlock()
	}
}

// reaches waits (at most e.wait: the property fails) until the follower
// has applied revision rev.
func (f *follower) reaches(rev int64, what string) {
	e := f.e
	e.t.Helper()
	deadline := time.Now().Add(e.wait)
	for {
		f.mu.Lock()
		at, err := f.rev, f.err
		f.mu.Unlock()
		switch {
		case at >= rev:
			return
		case err != nil:
			e.t.Fatalf("the watcher that reads failed before %s (revision %d): %v", what, rev, err)
		case time.Now().After(deadline):
			e.t.Fatalf("the watcher that reads is at revision %d, %v after %s (revision %d)", at, e.wait, what, rev)
		}
		select {
		case <-f.done:
			e.t.Fatalf("the watcher that reads ended at revision %d before %s (revision %d)", at, what, rev)
		case <-time.After(time.Millisecond):
		}
	}
}

// matches reports whether the follower's state equals the snapshot's.
func (f *follower) matches(snap core.Snapshot) (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false, fmt.Sprintf("watch failed: %v", f.err)
	}
	want := map[string][]byte{}
	for _, n := range snap.Nodes {
		want[n.Path] = n.Data
	}
	var diffs []string
	for path, d := range want {
		if got, ok := f.state[path]; !ok {
			diffs = append(diffs, "missing "+path)
		} else if !bytes.Equal(got, d) {
			diffs = append(diffs, fmt.Sprintf("%s holds %q, want %q", path, got, d))
		}
	}
	for path := range f.state {
		if _, ok := want[path]; !ok {
			diffs = append(diffs, "extra "+path)
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("... %d more", len(diffs)-10))
	}
	return len(diffs) == 0, fmt.Sprint(diffs)
}

// converges waits until the follower equals a fresh snapshot of its prefix.
func (f *follower) converges(what string) {
	e := f.e
	e.t.Helper()
	var why string
	deadline := time.Now().Add(e.wait)
	for {
		snap, err := f.c.Snapshot(e.ctx, f.prefix)
		e.ok(err, "snapshot %s", f.prefix)
		var ok bool
		if ok, why = f.matches(snap); ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: the watch follower did not converge on the snapshot at revision %d within %v: %s", what, snap.Revision, e.wait, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
