package memory

import (
	"context"
	"fmt"

	"github.com/metaplane/metaplane/core"
)

// candidacy is one Campaign call: queued, then elected (lead set and
// elected closed) or withdrawn (gone closed with goneErr).
type candidacy struct {
	client  *Backend
	sessID  int64
	cand    core.Candidate
	elected chan struct{}
	gone    chan struct{}
	goneErr error
	lead    *leadership
}

// leadership implements core.Leadership.
type leadership struct {
	s     *Store
	c     *candidacy
	epoch int64
	lost  chan struct{}
	ended bool // guarded by s.mu
}

func (l *leadership) Epoch() int64 { return l.epoch }

func (l *leadership) Fence() core.Fence {
	return core.Fence{Epoch: l.epoch, Token: l.epoch, Valid: true}
}

func (l *leadership) Lost() <-chan struct{} { return l.lost }

// Resign ends the leadership at once; the next candidate is elected. It is
// idempotent and never fails (the context is not needed).
func (l *leadership) Resign(ctx context.Context) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	l.s.loseLeaderLocked(l.c)
	return nil
}

func (s *Store) currentEpochLocked() int64 {
	if s.leader == nil {
		return s.epoch
	}
	return s.leader.lead.epoch
}

// fenceCurrentLocked reports whether f is unfenced or the current
// leadership's fence.
func (s *Store) fenceCurrentLocked(f core.Fence) bool {
	if !f.Valid {
		return true
	}
	return s.leader != nil && s.leader.lead.epoch == f.Epoch && f.Token == f.Epoch
}

// promoteLocked elects the first queued candidate when there is no leader.
func (s *Store) promoteLocked() {
	if s.leader != nil || len(s.queue) == 0 {
		return
	}
	c := s.queue[0]
	s.queue = s.queue[1:]
	s.epoch++
	c.lead = &leadership{s: s, c: c, epoch: s.epoch, lost: make(chan struct{})}
	s.leader = c
	close(c.elected)
	info := core.LeaderInfo{ID: c.cand.ID, Address: c.cand.Address, Epoch: s.epoch}
	for b := range s.clients {
		b.leaders.Publish(info)
	}
}

// loseLeaderLocked ends c's leadership if it is the current one.
func (s *Store) loseLeaderLocked(c *candidacy) {
	if s.leader != c || c.lead == nil || c.lead.ended {
		return
	}
	c.lead.ended = true
	close(c.lead.lost)
	s.leader = nil
	s.promoteLocked()
}

// withdrawLocked removes c from the queue, or ends its leadership.
func (s *Store) withdrawLocked(c *candidacy, err error) {
	if c.lead != nil {
		s.loseLeaderLocked(c)
		return
	}
	for i, q := range s.queue {
		if q == c {
			s.queue = append(s.queue[:i:i], s.queue[i+1:]...)
			c.goneErr = err
			close(c.gone)
			return
		}
	}
}

func (s *Store) dropSessionCandidaciesLocked(sessID int64, err error) {
	if s.leader != nil && s.leader.sessID == sessID {
		s.withdrawLocked(s.leader, err)
	}
	for _, c := range append([]*candidacy(nil), s.queue...) {
		if c.sessID == sessID {
			s.withdrawLocked(c, err)
		}
	}
}

func (s *Store) dropClientCandidaciesLocked(b *Backend, err error) {
	if s.leader != nil && s.leader.client == b {
		s.withdrawLocked(s.leader, err)
	}
	for _, c := range append([]*candidacy(nil), s.queue...) {
		if c.client == b {
			s.withdrawLocked(c, err)
		}
	}
}

// Campaign queues c and blocks until it is elected (candidates are elected
// in the order they campaigned) or ctx ends (the candidacy is withdrawn,
// and a leadership won at that moment is resigned). Errors: context errors,
// ErrSessionExpired (the client's session expired while waiting),
// ErrClosed.
func (b *Backend) Campaign(ctx context.Context, cand core.Candidate) (core.Leadership, error) {
	if err := b.begin(ctx); err != nil {
		return nil, err
	}
	if err := b.lock(); err != nil {
		return nil, err
	}
	s := b.s
	c := &candidacy{client: b, sessID: b.sess.id, cand: cand, elected: make(chan struct{}), gone: make(chan struct{})}
	s.queue = append(s.queue, c)
	s.promoteLocked()
	s.mu.Unlock()
	select {
	case <-c.elected:
		return c.lead, nil
	case <-c.gone:
		return nil, c.goneErr
	case <-ctx.Done():
		s.mu.Lock()
		s.withdrawLocked(c, ctx.Err())
		s.mu.Unlock()
		return nil, fmt.Errorf("campaign of %s withdrawn: %w", cand.ID, ctx.Err())
	}
}

// Leader returns the current leader. Errors: ErrNotFound (no leader),
// ErrClosed, context errors.
func (b *Backend) Leader(ctx context.Context) (core.LeaderInfo, error) {
	if err := b.begin(ctx); err != nil {
		return core.LeaderInfo{}, err
	}
	if err := b.lock(); err != nil {
		return core.LeaderInfo{}, err
	}
	defer b.s.mu.Unlock()
	l := b.s.leader
	if l == nil {
		return core.LeaderInfo{}, fmt.Errorf("%w: no leader", core.ErrNotFound)
	}
	return core.LeaderInfo{ID: l.cand.ID, Address: l.cand.Address, Epoch: l.lead.epoch}, nil
}

// ObserveLeader delivers the current leader, if any, and then each new
// leader; a slow consumer sees the latest one. Periods without a leader are
// not reported. The channel is closed when ctx ends or the client closes.
// Errors: ErrClosed, context errors.
func (b *Backend) ObserveLeader(ctx context.Context) (<-chan core.LeaderInfo, error) {
	if err := b.begin(ctx); err != nil {
		return nil, err
	}
	if err := b.lock(); err != nil {
		return nil, err
	}
	defer b.s.mu.Unlock()
	var current []core.LeaderInfo
	if l := b.s.leader; l != nil {
		current = append(current, core.LeaderInfo{ID: l.cand.ID, Address: l.cand.Address, Epoch: l.lead.epoch})
	}
	// A buffer of one: the latest leader wins.
	return b.leaders.Subscribe(ctx, 1, current...), nil
}

// Waiting returns how many candidates are queued behind the leader (or
// waiting with no leader): a test hook, so a test can know a candidacy has
// registered before it ends the current leadership.
func (s *Store) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}
