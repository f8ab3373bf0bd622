package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
)

// The bucket controller: the leader coordinator's one writer of
// LeaderAndIsr records. It runs on one goroutine per leadership (with the
// notifier), in rounds: bring the bucket states up to date from the image,
// see which tablet servers are alive, run the requests queued since the
// last round (AdjustIsr, ControlledShutdown, ElectLeaders), elect leaders
// for every bucket whose leader or ISR names a server that is gone and for
// every offline bucket that has a live ISR member again, write every
// change of the round in fenced, version-checked batches
// (catalog.UpdateLeaderAndIsr), answer the requests, then notify the
// tablet servers concerned (notifier.go). One writer means no two
// decisions of this coordinator race on a record; a write that races
// anything else (a DDL dropping the table) fails on its version and is
// decided again from the image in the next round.
//
// It is level-triggered: every round decides from the records and the
// registrations as they are, not from events, so a new leader coordinator
// that takes over in the middle of re-electing thousands of buckets
// simply finishes the job in its first round.

// ctlTask is a request run on the controller's goroutine, within a round:
// it reads records through r and stages changes with r.stage. done is
// called once the round's writes have ended, with their error.
type ctlTask struct {
	run  func(ctx context.Context, r *round)
	done func(err error)
}

// controller is a leadership's controller state shared with the RPC
// handlers: the queue of tasks, and the servers shutting down.
type controller struct {
	mu    sync.Mutex
	queue []ctlTask
	wake  chan struct{}
	// shuttingDown holds the servers that asked for a controlled shutdown,
	// with the owner (lease or session) of the registration they had
	// then: they lead nothing new until they register again.
	shuttingDown map[int32]int64
	// alive is the last round's live servers (for logs).
	alive map[int32]bool
	// rounds counts the rounds run; written the records written; offline
	// the offline buckets the last round left (tests, metrics).
	rounds, written int64
	offline         int
}

func (c *controller) offlineCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offline
}

func newController() *controller {
	return &controller{wake: make(chan struct{}, 1), shuttingDown: map[int32]int64{}}
}

// submit queues run and waits for its round to end (or ctx, or the
// leadership, to end first: the task may still run).
func (c *controller) submit(ctx context.Context, lost <-chan struct{}, run func(ctx context.Context, r *round)) error {
	errc := make(chan error, 1)
	c.mu.Lock()
	c.queue = append(c.queue, ctlTask{run: run, done: func(err error) { errc <- err }})
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-lost:
		return fmt.Errorf("%w: leadership lost while the request waited", core.ErrNotLeader)
	}
}

func (c *controller) take() []ctlTask {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queue
	c.queue = nil
	return q
}

// bucketRec is a bucket's record as a round sees it: as read (version)
// and, once staged, as it will be written.
type bucketRec struct {
	key      catalog.BucketKey
	version  int64
	rec      catalog.LeaderAndIsr
	replicas []int32
	staged   bool
}

// round is one controller round's view and pending writes.
type round struct {
	l       *leaderState
	lv      liveness
	servers []catalog.TabletServerInfo
	recs    map[string]*bucketRec // read or staged this round, by path
	assigns map[string]core.Node  // assignment nodes read this round
	order   []string              // staged paths, in staging order
	// edits are the round's assignment changes (reassign.go), by
	// assignment path, written after its LeaderAndIsr records.
	edits     map[string]*assignEdit
	editOrder []string
	// cancelled holds the reassignment nodes a task of the round undoes.
	cancelled map[string]bool
}

// load returns the records of keys (nil where the bucket does not exist),
// reading from the image what the round has not read yet.
func (r *round) load(ctx context.Context, keys []catalog.BucketKey) ([]*bucketRec, error) {
	out := make([]*bucketRec, len(keys))
	var miss []int
	var paths []string
	for i, k := range keys {
		if b, ok := r.recs[k.Path()]; ok {
			out[i] = b
			continue
		}
		miss = append(miss, i)
		paths = append(paths, k.Path())
	}
	if len(paths) == 0 {
		return out, nil
	}
	res, err := r.l.img.GetManyShared(ctx, paths, core.ReadOptions{})
	if err != nil {
		return nil, err
	}
	for j, i := range miss {
		if res[j].Err != nil {
			if errors.Is(res[j].Err, core.ErrNotFound) {
				continue
			}
			return nil, res[j].Err
		}
		rec, err := catalog.Decode(r.l.cat, res[j].Node, catalog.UnmarshalLeaderAndIsr)
		if err != nil {
			continue // a record that does not decode is left alone
		}
		k := keys[i]
		replicas, err := r.replicas(ctx, k)
		if err != nil {
			return nil, err
		}
		rec.ISR = slices.Clone(rec.ISR) // the decode cache's own
		b := &bucketRec{key: k, version: res[j].Node.Stat.Version, rec: rec, replicas: replicas}
		r.recs[k.Path()] = b
		out[i] = b
	}
	return out, nil
}

// replicas is bucket k's assigned replicas (nil when its assignment is
// gone).
func (r *round) replicas(ctx context.Context, k catalog.BucketKey) ([]int32, error) {
	p := k.AssignmentPath()
	n, ok := r.assigns[p]
	if !ok {
		got, err := core.Get(ctx, r.l.img, p)
		if err != nil && !errors.Is(err, core.ErrNotFound) {
			return nil, err
		}
		n = got
		r.assigns[p] = n
	}
	if n.Path == "" {
		return nil, nil
	}
	reps, err := r.l.cat.ReplicasOf(n, k.PartitionID >= 0, k.Bucket)
	if err != nil {
		return nil, nil
	}
	return reps, nil
}

// stateKey is the key of a bucket the bucket states hold.
func stateKey(b *bucketState) catalog.BucketKey {
	return catalog.BucketKey{TableID: b.TableId, PartitionID: b.PartitionId, Bucket: b.Bucket}
}

// stage makes rec b's record to write in this round.
func (r *round) stage(b *bucketRec, rec catalog.LeaderAndIsr) {
	b.rec = rec
	if !b.staged {
		b.staged = true
		r.order = append(r.order, b.key.Path())
	}
}

// controlLoop is the leadership's controller and notifier: it runs a
// round at once, then whenever a request is queued, the image reports a
// change under /tabletservers, or every few seconds, until ctx ends.
func (s *Server) controlLoop(ctx context.Context, l *leaderState) {
	conns := map[string]*grpc.ClientConn{}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	sent := map[int32][32]byte{}
	retry := time.NewTicker(3 * time.Second)
	defer retry.Stop()
	for {
		// The round reads the registrations as they are: a signal of a
		// change before it is taken care of.
		select {
		case <-l.buckets.servers:
		default:
		}
		build, again := s.controlRound(ctx, l, conns, sent)
		if again {
			// A write of the round failed on a version (a record changed
			// under it): decide again from the image, after a breath.
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-l.ctl.wake:
		case <-l.buckets.wake:
			// Only a change under /tabletservers wakes it (see
			// bucketStates). Debounce: a DDL is many events. A round
			// decodes the bucket records that changed and regroups
			// every bucket by server, so under a stream of DDLs on a
			// large catalog the rounds are spaced by notifyPacing
			// times what the last one took to build: the notifier's
			// share of the leader's CPU stays bounded instead of
			// taking it from the DDLs themselves. A queued request
			// ends the pause, and so does a tablet server that came or
			// went (its buckets wait for no pacing: a lost leader's
			// buckets are unavailable until the round).
			t := time.NewTimer(min(max(notifyDebounce, notifyPacing*build), notifyMaxPause))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			case <-l.ctl.wake:
				t.Stop()
			case <-l.buckets.servers:
				t.Stop()
			}
		case <-retry.C:
		}
	}
}

// controlRound runs one round (see controller). It returns how long the
// round took without its sends, and whether a write failed on a version
// (run another round soon).
func (s *Server) controlRound(ctx context.Context, l *leaderState, conns map[string]*grpc.ClientConn, sent map[int32][32]byte) (time.Duration, bool) {
	start := time.Now()
	tasks := l.ctl.take()
	fail := func(err error) {
		for _, t := range tasks {
			t.done(err)
		}
	}
	servers, err := l.cat.ListTabletServers(ctx)
	if err != nil {
		fail(err)
		return time.Since(start), false
	}
	if err := l.buckets.refresh(ctx, l.cat, l.img); err != nil {
		fail(err)
		return time.Since(start), false
	}
	r := &round{l: l, servers: servers, recs: map[string]*bucketRec{}, assigns: map[string]core.Node{},
		lv: liveness{alive: map[int32]bool{}, shuttingDown: map[int32]bool{}}}
	for _, ts := range servers {
		r.lv.alive[ts.ID] = true
	}
	s.noteServers(l, servers, r)
	for _, t := range tasks {
		t.run(ctx, r)
	}
	again := false
	if err := s.electGone(ctx, l, r); err != nil {
		fail(err)
		return time.Since(start), false
	}
	if err := s.progressReassignments(ctx, l, r); err != nil {
		s.log.Warn("reading the bucket reassignments in progress failed", "err", err)
	}
	var werr error
	if len(r.order) > 0 {
		updates := make([]catalog.LeaderAndIsrUpdate, len(r.order))
		for i, p := range r.order {
			b := r.recs[p]
			updates[i] = catalog.LeaderAndIsrUpdate{Key: b.key, Version: b.version, Record: b.rec}
		}
		n, err := l.cat.UpdateLeaderAndIsr(ctx, updates)
		l.ctl.mu.Lock()
		l.ctl.written += int64(n)
		l.ctl.mu.Unlock()
		s.metrics.leaderAndIsrWrites.Add(float64(n))
		if err != nil {
			werr = err
			again = errors.Is(err, core.ErrBadVersion) || errors.Is(err, core.ErrNotFound)
			if !again {
				s.log.Warn("writing leader and isr records failed", "written", n, "of", len(updates), "err", err)
			}
		}
		if err := l.buckets.refresh(ctx, l.cat, l.img); err != nil {
			s.log.Debug("bucket states refresh after the round's writes failed", "err", err)
		}
	}
	if werr == nil && len(r.editOrder) > 0 {
		// The assignments change after the records they follow: a
		// reassignment's old replicas leave the assignment only once the
		// ISR no longer names them.
		if err := r.writeEdits(ctx); err != nil {
			werr = err
			again = errors.Is(err, core.ErrBadVersion) || errors.Is(err, core.ErrNotFound) || errors.Is(err, core.ErrNodeExists)
			if !again {
				s.log.Warn("writing bucket assignments failed", "err", err)
			}
		}
	}
	for _, t := range tasks {
		t.done(werr)
	}
	l.ctl.mu.Lock()
	l.ctl.rounds++
	l.ctl.offline = len(l.buckets.offline)
	l.ctl.mu.Unlock()
	build := time.Since(start)
	s.notifyServers(ctx, l, servers, conns, sent)
	return build, again
}

// noteServers keeps the controller's view of the servers: it logs the
// servers that went and came since the last round, forgets a shutdown
// once the server registered again or went, and fills the round's
// shutting-down set.
func (s *Server) noteServers(l *leaderState, servers []catalog.TabletServerInfo, r *round) {
	c := l.ctl
	c.mu.Lock()
	defer c.mu.Unlock()
	owners := make(map[int32]int64, len(servers))
	for _, ts := range servers {
		owners[ts.ID] = ts.Owner
	}
	for id, owner := range c.shuttingDown {
		if cur, ok := owners[id]; !ok || cur != owner {
			delete(c.shuttingDown, id)
		} else {
			r.lv.shuttingDown[id] = true
		}
	}
	if c.alive != nil {
		for id := range c.alive {
			if !r.lv.alive[id] {
				s.log.Info("tablet server is gone (its lease expired, its session ended or it deregistered): its buckets get new leaders", "tablet_server", id)
			}
		}
	}
	c.alive = maps.Clone(r.lv.alive)
}

// electGone stages a new record for every bucket whose ISR (or leader)
// names a server that is not alive, and for every offline bucket with a
// live ISR member.
func (s *Server) electGone(ctx context.Context, l *leaderState, r *round) error {
	per := l.buckets.perServer()
	var keys []catalog.BucketKey
	seen := map[string]bool{}
	add := func(b *bucketState) {
		k := stateKey(b)
		if p := k.Path(); !seen[p] {
			seen[p] = true
			keys = append(keys, k)
		}
	}
	for id, list := range per {
		if r.lv.alive[id] {
			continue
		}
		for _, b := range list {
			add(b)
		}
	}
	for _, b := range l.buckets.offline {
		if slices.ContainsFunc(b.Isr, func(id int32) bool { return r.lv.alive[id] }) {
			add(b)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	recs, err := r.load(ctx, keys)
	if err != nil {
		return err
	}
	elected, offline := 0, 0
	for _, b := range recs {
		if b == nil {
			continue
		}
		rec, ok := electOnFailure(b.rec, b.replicas, r.lv)
		if !ok {
			continue
		}
		if rec.Leader == catalog.NoLeader {
			offline++
		} else if rec.Leader != b.rec.Leader {
			elected++
		}
		r.stage(b, rec)
	}
	if elected+offline > 0 {
		s.log.Info("bucket leaders elected after tablet servers went or came back", "elected", elected, "offline", offline, "changed", len(r.order))
	}
	return nil
}
