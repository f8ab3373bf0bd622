package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/metaplane/metaplane/core"
)

// GrantLease creates a lease with ttl for owner. Its id can own ephemeral
// nodes (core.Op.Lease); they are deleted when the lease expires (ttl
// without a renewal) or is revoked. Errors: ErrInvalidArgument (ttl <= 0),
// ErrFenced (fence valid but not current), ErrClosed, context errors.
func (b *Backend) GrantLease(ctx context.Context, owner string, ttl time.Duration, fence core.Fence) (int64, error) {
	if err := b.begin(ctx); err != nil {
		return 0, err
	}
	if ttl <= 0 {
		return 0, fmt.Errorf("%w: lease ttl %v must be positive", core.ErrInvalidArgument, ttl)
	}
	if err := b.lock(); err != nil {
		return 0, err
	}
	defer b.s.mu.Unlock()
	s := b.s
	if !s.fenceCurrentLocked(fence) {
		return 0, fmt.Errorf("%w: grant lease: fence epoch %d, current epoch %d", core.ErrFenced, fence.Epoch, s.currentEpochLocked())
	}
	l := &lease{id: s.newIDLocked(), owner: owner, ttl: ttl, deadline: s.opts.Now().Add(ttl)}
	s.leases[l.id] = l
	s.kickReaper()
	return l.id, nil
}

// RenewLease restarts the lease's clock. Errors: ErrSessionExpired (the
// lease is gone), ErrClosed, context errors.
func (b *Backend) RenewLease(ctx context.Context, id int64) error {
	if err := b.begin(ctx); err != nil {
		return err
	}
	if err := b.lock(); err != nil {
		return err
	}
	defer b.s.mu.Unlock()
	l := b.s.leases[id]
	if l == nil {
		return fmt.Errorf("%w: lease %d", core.ErrSessionExpired, id)
	}
	l.deadline = b.s.opts.Now().Add(l.ttl)
	return nil
}

// RevokeLease ends the lease now, deleting its ephemerals in one revision.
// Errors: ErrSessionExpired (already gone), ErrFenced, ErrClosed, context
// errors.
func (b *Backend) RevokeLease(ctx context.Context, id int64, fence core.Fence) error {
	if err := b.begin(ctx); err != nil {
		return err
	}
	if err := b.lock(); err != nil {
		return err
	}
	defer b.s.mu.Unlock()
	s := b.s
	if !s.fenceCurrentLocked(fence) {
		return fmt.Errorf("%w: revoke lease: fence epoch %d, current epoch %d", core.ErrFenced, fence.Epoch, s.currentEpochLocked())
	}
	l := s.leases[id]
	if l == nil {
		return fmt.Errorf("%w: lease %d", core.ErrSessionExpired, id)
	}
	s.endLeaseLocked(l)
	return nil
}

func (s *Store) endLeaseLocked(l *lease) {
	if s.leases[l.id] != l {
		return
	}
	delete(s.leases, l.id)
	s.deleteOwnedLocked(l.id)
}
