package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/metaplane/metaplane/core"
)

// promptTimeout bounds how long a blocked call may take to return once its
// context has ended (times the harness's TimeScale): generous, since
// "promptly" is a bound here, not a speed target.
const promptTimeout = 5 * time.Second

// promptly waits for done, which a call's goroutine closes or sends on
// when the call has returned, failing the property unless it comes within
// promptTimeout of the call's context ending.
func promptly[R any](e *env, done <-chan R, what string) R {
	e.t.Helper()
	bound := e.h.scale(promptTimeout)
	select {
	case r := <-done:
		return r
	case <-time.After(bound):
		e.t.Fatalf("%s did not return within %v of its context's end", what, bound)
	}
	var zero R
	return zero
}

// blockedCall is the outcome of one call cancelled while blocked.
type blockedCall struct {
	what string
	err  error
}

func blockedProperties() []Property {
	return []Property{
		{
			Name:        "Cancel/Blocked/Latency",
			Needs:       NeedsFaultInjection,
			Description: "reads, writes, a campaign and a watch stalled by injected latency and cancelled mid-call each return within 5 s with an error wrapping context.Canceled, and leave nothing behind: no node created or changed, nobody elected; the client works on",
			run: func(e *env) {
				c := e.client()
				f, _ := core.Optional[core.FaultInjector](c)
				e.create(e.c0, p("n"), []byte("orig"), core.Persistent)
				f.SetLatency(time.Hour)
				defer f.SetLatency(0)
				ctx, cancel := context.WithCancel(e.ctx)
				defer cancel()
				calls := []struct {
					what string
					call func() error
				}{
					{"Get", func() error { _, err := core.Get(ctx, c, p("n")); return err }},
					{"Children", func() error { _, _, err := c.Children(ctx, base, core.ReadOptions{}); return err }},
					{"Create", func() error {
						_, _, err := core.Create(ctx, c, p("new"), nil, core.CreateOptions{})
						return err
					}},
					{"Set", func() error {
						_, err := core.Set(ctx, c, p("n"), []byte("changed"), core.AnyVersion, core.Fence{})
						return err
					}},
					{"Campaign", func() error {
						l, err := c.Campaign(ctx, core.Candidate{ID: "stalled", Address: "test://stalled"})
						if err == nil {
							_ = l.Resign(e.ctx)
						}
						return err
					}},
					{"Watch", func() error { _, err := c.Watch(ctx, base, 0); return err }},
				}
				done := make(chan blockedCall, len(calls))
				for _, call := range calls {
					go func() { done <- blockedCall{call.what, call.call()} }()
				}
				// Nothing observable says the calls are in the latency's
				// wait; give them a moment (either way the property must
				// hold: the latency comes before any work).
				time.Sleep(100 * time.Millisecond)
				cancel()
				for range calls {
					r := promptly(e, done, "a call stalled by latency")
					if !errors.Is(r.err, context.Canceled) {
						e.t.Errorf("%s cancelled while stalled: got %v, want an error wrapping context.Canceled", r.what, r.err)
					}
				}
				f.SetLatency(0)
				e.mustNotExist(e.c0, p("new"))
				if n := e.data(e.c0, p("n"), []byte("orig")); n.Stat.Version != 0 {
					e.t.Errorf("%s has version %d after a cancelled set, want 0", p("n"), n.Stat.Version)
				}
				_, err := e.c0.Leader(e.ctx)
				e.is(err, core.ErrNotFound, "leader after a cancelled campaign")
				e.create(c, p("after"), nil, core.Persistent)
			},
		},
	}
}
