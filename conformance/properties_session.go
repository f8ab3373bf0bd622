package conformance

import (
	"context"
	"fmt"
	"time"

	"github.com/metaplane/metaplane/core"
)

// waitExpiredThenConnected reads ch until the expiry of old and the
// following connection of a new session; it returns the new session id.
func waitExpiredThenConnected(e *env, ch <-chan core.SessionEvent, old int64) int64 {
	e.t.Helper()
	var seen []core.SessionEvent
	expired := false
	for {
		ev := e.sessionEvent(ch, fmt.Sprintf("expiry of session %#x then a new connection (seen %v)", old, seen))
		seen = append(seen, ev)
		switch {
		case ev.State == core.SessionExpired:
			if ev.SessionID != old {
				e.t.Fatalf("expired event for session %#x, want %#x", ev.SessionID, old)
			}
			expired = true
		case ev.State == core.SessionConnected && expired:
			if ev.SessionID == old || ev.SessionID == 0 {
				e.t.Fatalf("connected after expiry with session %#x, want a new id (old %#x)", ev.SessionID, old)
			}
			return ev.SessionID
		case ev.State == core.SessionConnected:
			e.t.Fatalf("connected event before the expired one: %v", seen)
		case ev.State == core.SessionClosed:
			e.t.Fatalf("closed event while waiting for expiry: %v", seen)
		}
	}
}

func sessionProperties() []Property {
	return []Property{
		{
			Name:        "Session/Info",
			Description: "each client has its own connected session with a non-zero id and a positive timeout",
			run: func(e *env) {
				a, b := e.c0.Session(), e.client().Session()
				for _, s := range []core.SessionInfo{a, b} {
					if s.ID == 0 || s.Timeout <= 0 || s.State != core.SessionConnected {
						e.t.Fatalf("session %+v: want a non-zero id, a positive timeout, connected", s)
					}
				}
				if a.ID == b.ID {
					e.t.Fatalf("two clients share session %#x", a.ID)
				}
			},
		},
		{
			Name:        "Session/Ephemeral/VisibleToOthers",
			Description: "an ephemeral node is visible to other clients as soon as its create returned, and stays while its session lives",
			run: func(e *env) {
				owner := e.client()
				e.create(owner, p("e"), []byte("x"), core.Ephemeral)
				others := e.clients(2)
				for _, o := range others {
					e.data(o, p("e"), []byte("x"))
				}
				e.ok(others[0].Close(), "close another client")
				e.data(others[1], p("e"), []byte("x"))
			},
		},
		{
			Name:        "Session/Ephemeral/GoneOnClose",
			Description: "closing a client deletes its ephemeral nodes (and only them) for everyone",
			run: func(e *env) {
				owner := e.client()
				e.create(owner, p("e1"), nil, core.Ephemeral)
				e.create(owner, p("e2-"), nil, core.EphemeralSequential)
				e.create(owner, p("keep"), nil, core.Persistent)
				e.create(e.c0, p("mine"), nil, core.Ephemeral)
				e.ok(owner.Close(), "close")
				e.eventually("the closed session's ephemerals to go", func() bool {
					kids, _, err := e.c0.Children(e.ctx, base, core.ReadOptions{})
					return err == nil && fmt.Sprint(kids) == "[keep mine]"
				})
			},
		},
		{
			Name:        "Session/Ephemeral/GoneOnExpire",
			Description: "an expired session's ephemeral nodes disappear for every client; other sessions' ephemerals and persistent nodes stay",
			run: func(e *env) {
				owner, other := e.client(), e.client()
				e.create(owner, p("e"), nil, core.Ephemeral)
				e.create(owner, p("persist"), nil, core.Persistent)
				e.create(other, p("other"), nil, core.Ephemeral)
				e.expire(owner)
				e.gone(e.c0, p("e"))
				e.mustExist(e.c0, p("persist"))
				e.mustExist(e.c0, p("other"))
			},
		},
		{
			Name:        "Session/Ephemeral/OneRevision",
			Needs:       NeedsExactHistory,
			Description: "all of an expired session's ephemerals are deleted atomically: one revision, seen by a watch",
			run: func(e *env) {
				owner := e.client()
				for i := 0; i < 3; i++ {
					e.create(owner, p(fmt.Sprint("e", i)), nil, core.Ephemeral)
				}
				ch := e.watch(e.c0, base, 0)
				e.expire(owner)
				evs := e.nextEvents(ch, 3)
				for _, ev := range evs {
					if ev.Type != core.EventDeleted || ev.Revision != evs[0].Revision {
						e.t.Fatalf("events %s: want three deletions at one revision", describeEvents(evs))
					}
				}
			},
		},
		{
			Name:        "Session/Expire/NewSession",
			Description: "after its session expires a client carries on with a new session: new ephemerals belong to the new id",
			run: func(e *env) {
				c := e.client()
				old := c.Session().ID
				e.create(c, p("before"), nil, core.Ephemeral)
				e.expire(c)
				e.gone(e.c0, p("before"))
				e.eventually("a new connected session", func() bool {
					s := c.Session()
					return s.State == core.SessionConnected && s.ID != old && s.ID != 0
				})
				e.create(c, p("after"), nil, core.Ephemeral)
				if n := e.get(e.c0, p("after")); n.Stat.EphemeralOwner != c.Session().ID {
					e.t.Fatalf("new ephemeral owned by %#x, want the new session %#x", n.Stat.EphemeralOwner, c.Session().ID)
				}
			},
		},
		{
			Name:        "Session/Events/ExpiredThenConnected",
			Description: "an expiry is reported as SessionExpired for the old id, then SessionConnected with a new id",
			run: func(e *env) {
				c := e.client()
				ch, err := c.SessionEvents(e.ctx)
				e.ok(err, "session events")
				old := c.Session().ID
				e.expire(c)
				id := waitExpiredThenConnected(e, ch, old)
				e.eventually("Session() to report the new id", func() bool { return c.Session().ID == id })
			},
		},
		{
			Name:        "Session/Events/Closed",
			Description: "closing a client delivers SessionClosed and then closes the event channel",
			run: func(e *env) {
				c := e.client()
				ch, err := c.SessionEvents(e.ctx)
				e.ok(err, "session events")
				id := c.Session().ID
				e.ok(c.Close(), "close")
				var seen []core.SessionEvent
				timeout := time.After(e.wait)
				for {
					select {
					case ev, ok := <-ch:
						if !ok {
							if len(seen) == 0 || seen[len(seen)-1].State != core.SessionClosed || seen[len(seen)-1].SessionID != id {
								e.t.Fatalf("events before the channel closed: %v; want the last to be closed for %#x", seen, id)
							}
							return
						}
						seen = append(seen, ev)
					case <-timeout:
						e.t.Fatalf("event channel still open %v after close; events %v", e.wait, seen)
					}
				}
			},
		},
		{
			Name:        "Session/Events/CancelCloses",
			Description: "a session-event channel waiting for events is closed within 5 s when its context ends",
			run: func(e *env) {
				ctx, cancel := context.WithCancel(e.ctx)
				ch, err := e.c0.SessionEvents(ctx)
				e.ok(err, "session events")
				cancel()
				bound := e.h.scale(promptTimeout)
				timeout := time.After(bound)
				for {
					select {
					case _, ok := <-ch:
						if !ok {
							return
						}
					case <-timeout:
						e.t.Fatalf("session-event channel open %v after its context ended", bound)
					}
				}
			},
		},
	}
}

// Session/Timeout/Honoured's timings (see docs/conformance.md, "What the
// suite assumes of timing").
const (
	// honouredTimeout is the session timeout the property asks for.
	honouredTimeout = 2 * time.Second
	// honouredSlack is added to the latest expiry the timeout allows, for
	// a loaded machine (times Harness.TimeScale).
	honouredSlack = 5 * time.Second
)

// honouredBounds returns the earliest and latest time after a client with
// session timeout asked (reported: reported) is silenced at which its
// ephemerals may disappear: no earlier than 3/4 of asked less a third of
// it (the last heartbeat may have come up to a third of the timeout
// before the silence, for a client that renews every third of it), no
// later than 5/4 of the reported timeout plus slack.
func honouredBounds(asked, reported, slack time.Duration) (earliest, latest time.Duration) {
	return asked*3/4 - asked/3, reported*5/4 + slack
}

func sessionTimeoutProperties() []Property {
	return []Property{{
		Name:        "Session/Timeout/Honoured",
		Needs:       NeedsSilencer,
		Description: "a client silenced through the harness (no heartbeats, as if crashed or partitioned) loses its 2 s session: its ephemeral disappears for another client no earlier than 3/4 of the timeout less a third of it after the silence and no later than 5/4 of it plus 5 s; a client heartbeating all along keeps its session and its ephemeral over three timeouts, with no SessionExpired event",
		run: func(e *env) {
			silent := e.store.NewClient(e.t, ClientOptions{SessionTimeout: honouredTimeout})
			kept := e.store.NewClient(e.t, ClientOptions{SessionTimeout: honouredTimeout})
			reported := silent.Session().Timeout
			for _, c := range []core.MetadataBackend{silent, kept} {
				if got := c.Session().Timeout; got < honouredTimeout*3/4 || got > honouredTimeout*5/4 {
					e.t.Fatalf("asked for a session timeout of %v, got %v", honouredTimeout, got)
				}
			}
			events, err := kept.SessionEvents(e.ctx)
			e.ok(err, "session events of the kept-alive client")
			keptID, silentID := kept.Session().ID, silent.Session().ID
			e.create(kept, p("kept"), nil, core.Ephemeral)
			e.create(silent, p("silent"), nil, core.Ephemeral)
			if owner := e.stat(e.c0, p("silent")).EphemeralOwner; owner != silentID {
				e.t.Fatalf("the silenced client's ephemeral is owned by %#x, want its session %#x", owner, silentID)
			}
			earliest, latest := honouredBounds(honouredTimeout, reported, e.h.scale(honouredSlack))

			start := time.Now()
			e.store.(Silencer).Silence(e.t, silent)
			var gone time.Duration
			for {
				_, ok, err := core.Exists(e.ctx, e.c0, p("silent"))
				now := time.Since(start)
				if err == nil && !ok {
					gone = now
					break
				}
				if now > latest {
					e.t.Fatalf("the silenced client's ephemeral still there %v after the silence (last error %v): want it gone within %v (session timeout %v)", now.Round(time.Millisecond), err, latest, reported)
				}
				select {
				case <-e.ctx.Done():
					e.t.Fatalf("property context ended waiting for the silenced client's ephemeral to go")
				case <-time.After(10 * time.Millisecond):
				}
			}
			e.t.Logf("the silenced client's ephemeral went %v after the silence (session timeout %v)", gone.Round(time.Millisecond), reported)
			if gone < earliest {
				e.t.Fatalf("the silenced client's ephemeral went %v after the silence, before the earliest %v its %v session timeout allows", gone.Round(time.Millisecond), earliest, honouredTimeout)
			}

			// The kept-alive client, meanwhile, heartbeats: over three
			// timeouts from the silence it keeps its session.
			clockPasses(3*honouredTimeout - time.Since(start))
		drain:
			for {
				select {
				case ev, ok := <-events:
					if !ok {
						e.t.Fatalf("the kept-alive client's session-event channel closed within three timeouts")
					}
					if ev.State == core.SessionExpired || ev.State == core.SessionClosed || (ev.SessionID != 0 && ev.SessionID != keptID) {
						e.t.Fatalf("the kept-alive client got session event %v (its session %#x) within three timeouts", ev, keptID)
					}
				default:
					break drain
				}
			}
			// A loaded machine may suspend it for a moment, never expire it.
			e.eventually("the kept-alive client to be connected", func() bool { return kept.Session().State == core.SessionConnected })
			if s := kept.Session(); s.ID != keptID {
				e.t.Fatalf("the kept-alive client's session is %+v after three timeouts, want %#x", s, keptID)
			}
			if owner := e.stat(e.c0, p("kept")).EphemeralOwner; owner != keptID {
				e.t.Fatalf("the kept-alive client's ephemeral is owned by %#x after three timeouts, want %#x", owner, keptID)
			}
			e.create(kept, p("kept-after"), nil, core.Ephemeral)
		},
	}}
}
