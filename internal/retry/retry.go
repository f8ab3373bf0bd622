// Package retry is the one way the project's daemons wait between
// attempts: capped exponential backoff with jitter (a well-kept library,
// github.com/cenkalti/backoff), and a sleep that ends early with its
// context or a stop channel.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Backoff hands out the waits between attempts: initial, then about twice
// the previous, never more than max, each spread by ±50% (jitter) so that
// many clients retrying after one failure do not retry in step. It never
// gives up by itself: the caller's loop decides when to stop. Not safe for
// concurrent use.
type Backoff struct {
	b *backoff.ExponentialBackOff
}

// New returns a Backoff from initial to max.
func New(initial, max time.Duration) *Backoff {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(initial),
		backoff.WithMultiplier(2), // the library's default is 1.5
		backoff.WithMaxInterval(max),
		backoff.WithMaxElapsedTime(0), // never stop: the caller decides
	)
	return &Backoff{b: b}
}

// Next returns the next wait.
func (b *Backoff) Next() time.Duration { return b.b.NextBackOff() }

// Reset starts the waits over at the initial one (after a success).
func (b *Backoff) Reset() { b.b.Reset() }

// Nth returns the n-th wait (n >= 1; below 1 counts as 1) of a Backoff from
// initial to max, that is about initial·2^(n-1) capped at max, with the same
// jitter: for a caller that counts its failures itself (those within a
// window, say) rather than one after another.
func Nth(initial, max time.Duration, n int) time.Duration {
	b := New(initial, max)
	// Past 64 doublings every wait is the cap.
	for i := 1; i < n && i < 64; i++ {
		b.Next()
	}
	return b.Next()
}

// Sleep waits d, or less when ctx ends or any of stop is closed (or
// receives). It reports whether it waited the whole d.
func Sleep(ctx context.Context, d time.Duration, stop ...<-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	var s0, s1 <-chan struct{}
	if len(stop) > 0 {
		s0 = stop[0]
	}
	if len(stop) > 1 {
		s1 = stop[1]
	}
	select {
	case <-ctx.Done():
		return false
	case <-s0:
		return false
	case <-s1:
		return false
	case <-t.C:
		return true
	}
}
