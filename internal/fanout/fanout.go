// Package fanout delivers one stream of values to many subscribers without
// ever blocking the publisher: the "latest state to each subscriber, drop
// the oldest when slow" of session events and leader observations.
//
// Each subscriber has a channel with a bounded buffer. Publish puts the
// value into every subscriber's buffer at once; when a buffer is full, the
// oldest undelivered value in it is dropped to make room. A slow
// subscriber therefore loses intermediate values, but never the latest
// one, and never sees values out of order. A buffer of one is "latest
// wins" (leader observations); a larger one keeps a short history
// (session events).
//
// No goroutine is started per subscriber: ending a subscription when its
// context ends uses context.AfterFunc, and delivery is a non-blocking send.
// Every send and every close of a subscriber's channel happens under the
// hub's lock, so a send on a closed channel cannot happen.
//
// The package imports the standard library only, so that every backend
// may use it.
package fanout

import (
	"context"
	"sync"
)

// Hub fans values of type T out to its subscribers. The zero value is an
// open hub with no subscribers, ready to use; a Hub must not be copied
// after first use. Every method is safe for concurrent use, and none
// blocks on a subscriber: a Hub may be used while holding the caller's own
// locks (its callbacks never take them).
//
// Every subscriber sees the values published after it subscribed in the
// order Publish was called, as a subsequence that always ends with the
// latest value (once that value is received). Concurrent Publish calls are
// ordered by the hub's lock, the same order for every subscriber.
type Hub[T any] struct {
	mu     sync.Mutex
	subs   map[*subscriber[T]]struct{}
	closed bool
}

type subscriber[T any] struct {
	ch chan T
	// stop deregisters the AfterFunc that ends the subscription with its
	// context; set and called under the hub's lock.
	stop func() bool
}

// Subscribe returns a channel that receives the values published from now
// on, holding at most buffer undelivered values (a buffer below 1 counts
// as 1). The initial values, if any, are queued first, by the same rule,
// before any value published later: a caller that publishes and subscribes
// under one lock of its own can so hand a new subscriber the current state
// without a gap or a duplicate.
//
// The channel is closed when ctx ends (promptly, without a goroutine
// waiting for it) or when the hub closes. On a closed hub, or with a ctx
// that has already ended, it is returned closed and empty.
func (h *Hub[T]) Subscribe(ctx context.Context, buffer int, initial ...T) <-chan T {
	if buffer < 1 {
		buffer = 1
	}
	s := &subscriber[T]{ch: make(chan T, buffer)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || ctx.Err() != nil {
		close(s.ch)
		return s.ch
	}
	for _, v := range initial {
		s.deliver(v)
	}
	if h.subs == nil {
		h.subs = map[*subscriber[T]]struct{}{}
	}
	h.subs[s] = struct{}{}
	// The callback runs in its own goroutine once ctx ends (at once if it
	// ended since the check above) and waits for the lock held here.
	s.stop = context.AfterFunc(ctx, func() { h.unsubscribe(s) })
	return s.ch
}

// unsubscribe ends s's subscription, unless Close already did.
func (h *Hub[T]) unsubscribe(s *subscriber[T]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s.ch)
	}
}

// Publish delivers v to every current subscriber without blocking,
// dropping a subscriber's oldest undelivered value when its buffer is
// full. On a closed hub it does nothing. The hub keeps v (a shallow copy)
// until it is received or dropped: the caller must not modify what v
// refers to afterwards.
func (h *Hub[T]) Publish(v T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		s.deliver(v)
	}
}

// Close closes every subscriber's channel; values already delivered stay
// readable before the close is seen. Later Publish calls do nothing and
// later Subscribe calls return a closed channel. Idempotent.
func (h *Hub[T]) Close() {
	h.closeWith(nil)
}

// CloseWith publishes last and closes the hub, atomically: no value
// published concurrently can come after last, and no subscriber can join
// in between. Only the first Close or CloseWith has an effect.
func (h *Hub[T]) CloseWith(last T) {
	h.closeWith(&last)
}

func (h *Hub[T]) closeWith(last *T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for s := range h.subs {
		if last != nil {
			s.deliver(*last)
		}
		s.stop()
		close(s.ch)
	}
	h.subs = nil
}

// Len returns the number of current subscribers (a subscription whose
// context ended may be counted until its channel is closed).
func (h *Hub[T]) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// deliver puts v into s's buffer, dropping the oldest value when it is
// full. It is called with the hub's lock held, so this is the only
// goroutine that sends on s.ch or closes it; the subscriber only receives.
// Each round either sends or frees a slot (by dropping the oldest value,
// or because the subscriber took it first), so the second round sends at
// the latest.
func (s *subscriber[T]) deliver(v T) {
	for {
		select {
		case s.ch <- v:
			return
		default:
		}
		select {
		case <-s.ch:
		default:
		}
	}
}
