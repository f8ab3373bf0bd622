package tabletserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// The reference tablet server's part in bucket leadership: it keeps the
// buckets the coordinator leader last told it it leads or follows
// (NotifyLeaderAndIsr replaces them whole), and as a leader it keeps each
// bucket's ISR right with AdjustIsr: a replica it is told is lagging
// (SetReplicaLag, the test knob standing in for a follower that stopped
// fetching) leaves the ISR; an assigned replica that is registered and
// not lagging joins it. On stop it asks for a controlled shutdown (its
// leaderships move first) and deregisters.

type bucketState = adminv1.NotifyLeaderAndIsrRequest_BucketState

func keyOf(b *bucketState) bucketKey { return bucketKey{b.TableId, b.PartitionId, b.Bucket} }

// setBuckets replaces the buckets the server leads or follows.
func (s *Server) setBuckets(list []*bucketState) {
	s.mu.Lock()
	s.buckets = make(map[bucketKey]*bucketState, len(list))
	for _, b := range list {
		s.buckets[keyOf(b)] = b
	}
	s.mu.Unlock()
	s.wakeIsr()
}

func (s *Server) wakeIsr() {
	select {
	case s.isrWake <- struct{}{}:
	default:
	}
}

// SetReplicaLag marks replica as lagging (it leaves the ISRs of the
// buckets this server leads) or caught up (it joins them again once
// registered).
func (s *Server) SetReplicaLag(replica int32, lagging bool) {
	s.mu.Lock()
	if lagging {
		s.lagging[replica] = true
	} else {
		delete(s.lagging, replica)
	}
	s.mu.Unlock()
	s.wakeIsr()
}

// bucketLists returns the buckets the server leads and those it follows
// (an ISR member, not the leader), each in (table, partition, bucket)
// order.
func (s *Server) bucketLists() (leading, following []*bucketState) {
	s.mu.Lock()
	for _, b := range s.buckets {
		if b.Leader == s.opts.ID {
			leading = append(leading, b)
		} else {
			following = append(following, b)
		}
	}
	s.mu.Unlock()
	order := func(a, b *bucketState) int {
		if a.TableId != b.TableId {
			return cmpInt(a.TableId, b.TableId)
		}
		if a.PartitionId != b.PartitionId {
			return cmpInt(a.PartitionId, b.PartitionId)
		}
		return cmpInt(int64(a.Bucket), int64(b.Bucket))
	}
	slices.SortFunc(leading, order)
	slices.SortFunc(following, order)
	return leading, following
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// isrLoop runs adjustIsr whenever the buckets, the lagging replicas or the
// view change, and every second, until ctx ends.
func (s *Server) isrLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.isrWake:
		case <-s.img.Changed():
		case <-t.C:
		}
		s.adjustIsr(ctx)
	}
}

// adjustIsr asks the coordinator leader for the ISR changes the buckets
// this server leads need (one request for all of them) and keeps the
// records it answers with.
func (s *Server) adjustIsr(ctx context.Context) {
	leading, _ := s.bucketLists()
	if len(leading) == 0 {
		return
	}
	s.mu.Lock()
	lagging := maps.Clone(s.lagging)
	s.mu.Unlock()
	registered := map[int32]bool{}
	if names, _, err := s.img.Children(ctx, catalog.TabletServerIDsPath, core.ReadOptions{}); err == nil {
		for _, n := range names {
			if id, err := strconv.ParseInt(n, 10, 32); err == nil {
				registered[int32(id)] = true
			}
		}
	}
	assigns := map[string]map[int32][]int32{}
	replicasOf := func(b *bucketState) []int32 {
		k := catalog.BucketKey{TableID: b.TableId, PartitionID: b.PartitionId, Bucket: b.Bucket}
		p := k.AssignmentPath()
		a, ok := assigns[p]
		if !ok {
			if n, err := core.Get(ctx, s.img, p); err == nil {
				if b.PartitionId >= 0 {
					pa, _ := catalog.UnmarshalPartitionAssignment(n.Data)
					a = pa.Buckets
				} else {
					ta, _ := catalog.UnmarshalTableAssignment(n.Data)
					a = ta.Buckets
				}
			}
			assigns[p] = a
		}
		return a[b.Bucket]
	}
	req := &adminv1.AdjustIsrRequest{ServerId: s.opts.ID}
	for _, b := range leading {
		want := make([]int32, 0, len(b.Isr)+1)
		for _, r := range b.Isr {
			if r == s.opts.ID || !lagging[r] {
				want = append(want, r)
			}
		}
		for _, r := range replicasOf(b) {
			if !slices.Contains(want, r) && registered[r] && !lagging[r] {
				want = append(want, r)
			}
		}
		if catalog.SameReplicas(want, b.Isr) {
			continue
		}
		req.Buckets = append(req.Buckets, &adminv1.AdjustIsrRequest_Bucket{TableId: b.TableId, PartitionId: b.PartitionId, Bucket: b.Bucket,
			LeaderEpoch: b.LeaderEpoch, BucketEpoch: b.BucketEpoch, NewIsr: want})
	}
	if len(req.Buckets) == 0 {
		return
	}
	var resp *adminv1.AdjustIsrResponse
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := s.callCoordinator(cctx, func(ctx context.Context, t adminv1.TabletServerServiceClient) error {
		var err error
		resp, err = t.AdjustIsr(ctx, req)
		return err
	})
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("AdjustIsr failed; asking again later", "buckets", len(req.Buckets), "err", err)
		}
		return
	}
	if !s.observeEpoch(resp.CoordinatorEpoch) {
		return
	}
	changed, refused := 0, 0
	s.mu.Lock()
	for _, r := range resp.Results {
		k := bucketKey{r.Bucket.TableId, r.Bucket.PartitionId, r.Bucket.Bucket}
		if r.ErrorCode != "" {
			refused++
			s.log.Debug("AdjustIsr refused", "bucket", k, "code", r.ErrorCode, "message", r.ErrorMessage)
			continue
		}
		if b, ok := s.buckets[k]; ok {
			s.buckets[k] = &bucketState{TableId: b.TableId, PartitionId: b.PartitionId, Bucket: b.Bucket,
				Leader: r.Leader, LeaderEpoch: r.LeaderEpoch, Isr: r.Isr, BucketEpoch: r.BucketEpoch}
			changed++
		}
	}
	s.mu.Unlock()
	s.log.Info("ISR adjusted", "changed", changed, "refused", refused)
}

// callCoordinator runs call on the coordinator leader's tablet-server
// service: through the seeds' client (Raft), or, on a backend the server
// follows directly (ZooKeeper), at the leader's address as the backend
// names it.
func (s *Server) callCoordinator(ctx context.Context, call func(ctx context.Context, t adminv1.TabletServerServiceClient) error) error {
	if c := s.client.Load(); c != nil {
		return c.Tablets(ctx, call)
	}
	bp := s.direct.Load()
	if bp == nil {
		return fmt.Errorf("%w: no backend client open to find the coordinator leader with", core.ErrUnavailable)
	}
	li, err := (*bp).Leader(ctx)
	if err != nil {
		return err
	}
	if li.Address == "" {
		return fmt.Errorf("%w: no coordinator leader is known", core.ErrUnavailable)
	}
	addr := adminapi.HostPort(li.Address)
	s.leaderMu.Lock()
	c := s.leaderClient
	if c == nil || s.leaderAddr != addr {
		if c != nil {
			c.Close()
		}
		c, err = adminclient.NewClientWithOptions([]string{addr}, adminclient.Options{TLS: s.opts.TLS, Username: s.opts.Username, Password: s.opts.Password})
		if err != nil {
			s.leaderMu.Unlock()
			return err
		}
		s.leaderClient, s.leaderAddr = c, addr
	}
	s.leaderMu.Unlock()
	return c.Tablets(ctx, call)
}

// closeLeaderClient closes the client callCoordinator opened.
func (s *Server) closeLeaderClient() {
	s.leaderMu.Lock()
	defer s.leaderMu.Unlock()
	if s.leaderClient != nil {
		s.leaderClient.Close()
		s.leaderClient, s.leaderAddr = nil, ""
	}
}

// controlledShutdown asks the coordinator leader to move every leadership
// of this server elsewhere, asking again (after a short pause) while some
// remain, until it leads nothing or ctx ends. Each call has
// shutdownCallTimeout; after shutdownMaxFailures calls that got no answer
// (no coordinator leader reachable) it gives up. It returns how many
// leaderships remained at the end.
func (s *Server) controlledShutdown(ctx context.Context) (remaining int, err error) {
	start := time.Now()
	failures, stuck := 0, 0
	for attempt := 1; ; attempt++ {
		var resp *adminv1.ControlledShutdownResponse
		cctx, cancel := context.WithTimeout(ctx, shutdownCallTimeout)
		err = s.callCoordinator(cctx, func(ctx context.Context, t adminv1.TabletServerServiceClient) error {
			var err error
			resp, err = t.ControlledShutdown(ctx, &adminv1.ControlledShutdownRequest{ServerId: s.opts.ID})
			return err
		})
		cancel()
		if err == nil {
			remaining = len(resp.Remaining)
			s.log.Info("controlled shutdown", "attempt", attempt, "moved", resp.Moved, "still_led", remaining, "took", time.Since(start).Round(time.Millisecond))
			if remaining == 0 {
				return 0, nil
			}
			// The buckets left have no other live ISR member; one may
			// come (a follower catching up), so ask a few more times, not
			// until the timeout.
			if resp.Moved == 0 {
				if stuck++; stuck >= shutdownMaxFailures {
					return remaining, fmt.Errorf("%w: %d buckets still led by this server: no other live ISR member to take them", core.ErrUnavailable, remaining)
				}
			}
		} else if failures++; failures >= shutdownMaxFailures {
			return remaining, fmt.Errorf("no coordinator leader answered %d controlled shutdown requests: %w", failures, err)
		}
		t := time.NewTimer(500 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			if err == nil {
				err = fmt.Errorf("%w: %d buckets still led by this server (no other live ISR member)", core.ErrUnavailable, remaining)
			}
			return remaining, err
		case <-t.C:
		}
	}
}

// A controlled shutdown's calls: each bounded, and given up after a few
// without an answer (no coordinator to hand over to) or a few that moved
// nothing.
const (
	shutdownCallTimeout = 2 * time.Second
	shutdownMaxFailures = 3
)

// stopGracefully is what a stopping server does before it goes, within
// Options.ShutdownTimeout: a controlled shutdown, then (through the
// coordinator, on Raft) its deregistration. On a backend it follows
// directly, closing its session afterwards deregisters it.
func (s *Server) stopGracefully(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	if remaining, err := s.controlledShutdown(ctx); err != nil {
		s.log.Warn("controlled shutdown did not finish: the buckets this server still leads are re-elected once it is gone",
			"still_led", remaining, "err", err)
	}
	if c := s.client.Load(); c != nil {
		lease := s.lease.Load()
		err := c.Tablets(ctx, func(ctx context.Context, t adminv1.TabletServerServiceClient) error {
			_, err := t.DeregisterTabletServer(ctx, &adminv1.DeregisterTabletServerRequest{ServerId: s.opts.ID, LeaseId: lease})
			return err
		})
		if err != nil && !errors.Is(err, context.Canceled) {
			s.log.Warn("deregistration failed: the registration goes when its lease expires", "err", err)
		} else if err == nil {
			s.registered.Store(false)
			s.log.Info("deregistered", "lease", lease)
		}
	}
}
