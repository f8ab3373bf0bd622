package conformance

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/metaplane/metaplane/core"
)

// closesSoon fails unless ch is closed within promptTimeout (responses
// before the close are drained).
func closesSoon(e *env, ch <-chan core.WatchResponse, what string) {
	e.t.Helper()
	bound := e.h.scale(promptTimeout)
	timeout := time.After(bound)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			e.t.Fatalf("watch channel still open %v after %s", bound, what)
		}
	}
}

func watchProperties() []Property {
	return []Property{
		{
			Name:        "Watch/Order",
			Needs:       NeedsExactHistory,
			Description: "a watch delivers every create, update and delete under its prefix, in revision order, with strictly increasing revisions across transactions",
			run: func(e *env) {
				ch := e.watch(e.c0, base, 0)
				w := e.client()
				e.create(w, p("n"), []byte("0"), core.Persistent)
				e.set(w, p("n"), []byte("1"), 0)
				e.create(w, p("m"), nil, core.Persistent)
				e.set(w, p("n"), []byte("2"), 1)
				e.ok(core.Delete(e.ctx, w, p("n"), core.AnyVersion, core.Fence{}), "delete")
				evs := e.nextEvents(ch, 5)
				want := []struct {
					t    core.EventType
					path string
				}{{core.EventCreated, p("n")}, {core.EventUpdated, p("n")}, {core.EventCreated, p("m")}, {core.EventUpdated, p("n")}, {core.EventDeleted, p("n")}}
				for i, ev := range evs {
					if ev.Type != want[i].t || ev.Path != want[i].path {
						e.t.Fatalf("events %s: event %d is %v %s, want %v %s", describeEvents(evs), i, ev.Type, ev.Path, want[i].t, want[i].path)
					}
					if i > 0 && ev.Revision <= evs[i-1].Revision {
						e.t.Fatalf("events %s: revisions not strictly increasing", describeEvents(evs))
					}
				}
			},
		},
		{
			Name:        "Watch/EventData",
			Needs:       NeedsExactHistory,
			Description: "created and updated events carry the node's data and stat after the change; the revision matches the stat's",
			run: func(e *env) {
				ch := e.watch(e.c0, base, 0)
				e.create(e.c0, p("n"), []byte("a"), core.Persistent)
				e.set(e.c0, p("n"), []byte("bb"), 0)
				evs := e.nextEvents(ch, 2)
				c, u := evs[0], evs[1]
				if string(c.Data) != "a" || c.Stat.Version != 0 || c.Stat.CreateRevision != c.Revision || c.Stat.DataLength != 1 {
					e.t.Fatalf("created event %+v: want data a, version 0, create revision = event revision", c)
				}
				if string(u.Data) != "bb" || u.Stat.Version != 1 || u.Stat.ModifyRevision != u.Revision || u.Stat.CreateRevision != c.Revision {
					e.t.Fatalf("updated event %+v: want data bb, version 1, modify revision = event revision", u)
				}
			},
		},
		{
			Name:        "Watch/Prefix",
			Description: "a watch on a prefix reports changes at and below it and none elsewhere (not a sibling sharing the name's start)",
			run: func(e *env) {
				ch := e.watch(e.c0, p("a"), 0)
				e.create(e.c0, p("ab"), nil, core.Persistent)
				e.create(e.c0, p("b"), nil, core.Persistent)
				e.create(e.c0, p("a"), nil, core.Persistent)
				e.create(e.c0, p("a", "x"), nil, core.Persistent)
				e.set(e.c0, p("ab"), []byte("noise"), core.AnyVersion)
				e.set(e.c0, p("a", "x"), []byte("done"), core.AnyVersion)
				timeout := time.After(e.wait)
				for {
					select {
					case r, ok := <-ch:
						if !ok || r.Err != nil {
							e.t.Fatalf("watch ended (%v) before the last change", r.Err)
						}
						for _, ev := range r.Events {
							if !core.HasPrefixPath(ev.Path, p("a")) {
								e.t.Fatalf("watch on %s reported %v %s", p("a"), ev.Type, ev.Path)
							}
							if ev.Path == p("a", "x") && string(ev.Data) == "done" {
								return
							}
						}
					case <-timeout:
						e.t.Fatalf("no event for the last change within %v", e.wait)
					}
				}
			},
		},
		{
			Name:        "Watch/FromZero/OnlyNew",
			Description: "a watch from revision 0 starts with the next change, not with older ones",
			run: func(e *env) {
				e.create(e.c0, p("old"), nil, core.Persistent)
				e.set(e.c0, p("old"), []byte("x"), core.AnyVersion)
				ch := e.watch(e.c0, base, 0)
				e.create(e.c0, p("new"), nil, core.Persistent)
				timeout := time.After(e.wait)
				for {
					select {
					case r, ok := <-ch:
						if !ok || r.Err != nil {
							e.t.Fatalf("watch ended (%v) before the new change", r.Err)
						}
						if r.Reset {
							continue
						}
						for _, ev := range r.Events {
							if ev.Path == p("old") {
								e.t.Fatalf("a watch from 0 reported an older change: %v %s", ev.Type, ev.Path)
							}
							if ev.Path == p("new") {
								return
							}
						}
					case <-timeout:
						e.t.Fatalf("no event for the new node within %v", e.wait)
					}
				}
			},
		},
		{
			Name:        "Watch/FromRevision/NoGap",
			Needs:       NeedsExactHistory,
			Description: "a watch from an earlier revision replays every change from it, each exactly once and in order, then follows new ones",
			run: func(e *env) {
				var paths []string
				for i := 0; i < 10; i++ {
					paths = append(paths, e.create(e.c0, p(fmt.Sprintf("n%02d", i)), []byte{byte(i)}, core.Persistent))
				}
				from := e.get(e.c0, paths[0]).Stat.CreateRevision
				ch := e.watch(e.client(), base, from)
				e.create(e.c0, p("n10"), []byte{10}, core.Persistent)
				paths = append(paths, p("n10"))
				evs := e.nextEvents(ch, len(paths))
				for i, ev := range evs {
					if ev.Type != core.EventCreated || ev.Path != paths[i] || ev.Data[0] != byte(i) {
						e.t.Fatalf("event %d is %v %s, want created %s; all: %s", i, ev.Type, ev.Path, paths[i], describeEvents(evs))
					}
					if i > 0 && ev.Revision <= evs[i-1].Revision {
						e.t.Fatalf("revisions out of order: %s", describeEvents(evs))
					}
				}
				if evs[0].Revision != from {
					e.t.Fatalf("first replayed revision %d, want %d", evs[0].Revision, from)
				}
			},
		},
		{
			Name:        "Watch/Txn/OneRevision",
			Needs:       NeedsExactHistory,
			Description: "the changes of one transaction arrive together, at one revision, in op order",
			run: func(e *env) {
				ch := e.watch(e.c0, base, 0)
				ops := []core.Op{core.CreateOp(p("x"), nil, core.Persistent), core.CreateOp(p("a"), nil, core.Persistent), core.SetOp(p("x"), []byte("v"), 0)}
				res, err := e.c0.Txn(e.ctx, ops, core.TxnOptions{})
				e.ok(err, "txn")
				evs := e.nextEvents(ch, 3)
				want := []string{p("x"), p("a"), p("x")}
				for i, ev := range evs {
					if ev.Path != want[i] || ev.Revision != res.Revision {
						e.t.Fatalf("events %s: want %v at revision %d", describeEvents(evs), want, res.Revision)
					}
				}
			},
		},
		{
			Name:        "Watch/RevisionsIncrease",
			Description: "the responses of a watch carry non-decreasing revisions, and events within a response are in revision order",
			run: func(e *env) {
				ch := e.watch(e.c0, base, 0)
				e.create(e.c0, p("n"), nil, core.Persistent)
				for i := 0; i < 10; i++ {
					e.set(e.c0, p("n"), []byte(fmt.Sprint(i)), core.AnyVersion)
				}
				var last int64
				timeout := time.After(e.wait)
				for {
					select {
					case r, ok := <-ch:
						if !ok || r.Err != nil {
							e.t.Fatalf("watch ended (%v) before the last change", r.Err)
						}
						if r.Revision < last {
							e.t.Fatalf("response revision %d after %d", r.Revision, last)
						}
						last = r.Revision
						for i, ev := range r.Events {
							if i > 0 && ev.Revision < r.Events[i-1].Revision {
								e.t.Fatalf("events out of order in one response: %s", describeEvents(r.Events))
							}
							if ev.Path == p("n") && string(ev.Data) == "9" {
								return
							}
						}
					case <-timeout:
						e.t.Fatalf("the last change never arrived")
					}
				}
			},
		},
		{
			Name:        "Watch/Convergence",
			Description: "a consumer that starts from a snapshot and applies the watch's events and resets ends equal to a final snapshot, under concurrent writers",
			run: func(e *env) {
				e.create(e.c0, p("seed"), []byte("s"), core.Persistent)
				f := e.follow(e.client(), base)
				ws := e.clients(3)
				errs := make([]error, len(ws))
				parallel(len(ws), func(i int) {
					c := ws[i]
					for j := 0; j < 15 && errs[i] == nil; j++ {
						path := p(fmt.Sprintf("w%d-%d", i, j%5))
						switch j / 5 {
						case 0:
							_, _, errs[i] = core.Create(e.ctx, c, path, []byte(fmt.Sprint(j)), core.CreateOptions{})
						case 1:
							_, errs[i] = core.Set(e.ctx, c, path, []byte(fmt.Sprint("u", j)), core.AnyVersion, core.Fence{})
						case 2:
							if j%2 == 0 {
								errs[i] = core.Delete(e.ctx, c, path, core.AnyVersion, core.Fence{})
							}
						}
					}
				})
				for i, err := range errs {
					e.ok(err, "writer %d", i)
				}
				f.converges("after concurrent writes")
			},
		},
		{
			Name:        "Watch/SessionEnd",
			Description: "a watch follower sees the ephemerals of an expired and of a closed session disappear",
			run: func(e *env) {
				a, b := e.client(), e.client()
				e.create(a, p("a1"), nil, core.Ephemeral)
				e.create(a, p("a2-"), nil, core.EphemeralSequential)
				e.create(b, p("b1"), nil, core.Ephemeral)
				e.create(e.c0, p("keep"), nil, core.Persistent)
				f := e.follow(e.client(), base)
				e.expire(a)
				e.ok(b.Close(), "close")
				e.gone(e.c0, p("a1"))
				e.gone(e.c0, p("b1"))
				f.converges("after a session expired and another closed")
				f.mu.Lock()
				n := len(f.state)
				f.mu.Unlock()
				if n != 2 {
					e.t.Fatalf("follower holds %d nodes, want 2 (%s and %s)", n, base, p("keep"))
				}
			},
		},
		{
			Name:        "Watch/Reset",
			Description: "a watch from an earlier revision starts with a Reset holding the current state on a backend without exact history, and never sends a Reset on one with it",
			run: func(e *env) {
				e.create(e.c0, p("a"), []byte("1"), core.Persistent)
				from := e.get(e.c0, p("a")).Stat.CreateRevision
				e.create(e.c0, p("b"), []byte("2"), core.Persistent)
				e.ok(core.Delete(e.ctx, e.c0, p("a"), core.AnyVersion, core.Fence{}), "delete")
				ch := e.watch(e.client(), base, from)
				var first core.WatchResponse
				select {
				case r, ok := <-ch:
					if !ok || r.Err != nil {
						e.t.Fatalf("watch from %d ended at once (%v)", from, r.Err)
					}
					first = r
				case <-time.After(e.wait):
					e.t.Fatalf("no response within %v to a watch from an earlier revision", e.wait)
				}
				if e.caps.ExactHistory {
					if first.Reset {
						e.t.Fatalf("a backend declaring ExactHistory sent a Reset")
					}
					if len(first.Events) == 0 || first.Events[0].Path != p("a") || first.Events[0].Type != core.EventCreated {
						e.t.Fatalf("first replayed events %s, want the creation of %s", describeEvents(first.Events), p("a"))
					}
					return
				}
				if !first.Reset {
					e.t.Fatalf("first response %s is not a Reset, on a backend without exact history", describeEvents(first.Events))
				}
				got := map[string]string{}
				for _, ev := range first.Events {
					if ev.Type != core.EventCreated {
						e.t.Fatalf("a Reset holds a %v event for %s, want only created", ev.Type, ev.Path)
					}
					got[ev.Path] = string(ev.Data)
				}
				if _, ok := got[p("a")]; ok || got[p("b")] != "2" {
					e.t.Fatalf("Reset state %v: want %s holding \"2\" and no %s", got, p("b"), p("a"))
				}
			},
		},
		{
			Name:        "Watch/Reset/Pages",
			Description: "a watch from an earlier revision over a state larger than a page of a snapshot replays it (exact history) or sends it as a Reset whose pages (Partial on all but the last) share one revision and hold each node once, in path order",
			run: func(e *env) {
				const nodes = 32
				size := 48 << 10
				if m := e.caps.MaxValueSize; m > 0 && size > m {
					size = m
				}
				want := map[string]string{base: ""}
				from := int64(0)
				for i := 0; i < nodes; i++ {
					data := bytes.Repeat([]byte{byte('a' + i%26)}, size)
					data[0] = byte(i)
					e.create(e.c0, p(fmt.Sprintf("n%02d", i)), data, core.Persistent)
					if i == 0 {
						from = e.get(e.c0, p("n00")).Stat.CreateRevision
					}
					want[p(fmt.Sprintf("n%02d", i))] = string(data)
				}
				ch := e.watch(e.client(), base, from)
				got := map[string]string{}
				if e.caps.ExactHistory {
					for _, ev := range e.nextEvents(ch, nodes) {
						if ev.Type == core.EventCreated {
							got[ev.Path] = string(ev.Data)
						}
					}
					got[base] = ""
				} else {
					var rev int64
					last := ""
					for pages := 0; ; pages++ {
						var r core.WatchResponse
						select {
						case v, ok := <-ch:
							if !ok || v.Err != nil {
								e.t.Fatalf("watch ended (%v) in page %d of its Reset", v.Err, pages+1)
							}
							r = v
						case <-time.After(e.wait):
							e.t.Fatalf("no page %d of the Reset within %v", pages+1, e.wait)
						}
						if !r.Reset {
							e.t.Fatalf("response %d is not a Reset page (the Reset's last page had Partial set): %s", pages+1, describeEvents(r.Events))
						}
						if pages == 0 {
							rev = r.Revision
						} else if r.Revision != rev {
							e.t.Fatalf("page %d of the Reset at revision %d, the first at %d: want one revision", pages+1, r.Revision, rev)
						}
						for _, ev := range r.Events {
							if _, dup := got[ev.Path]; dup || ev.Path <= last {
								e.t.Fatalf("page %d: %s out of path order or twice (after %s)", pages+1, ev.Path, last)
							}
							got[ev.Path], last = string(ev.Data), ev.Path
						}
						if !r.Partial {
							break
						}
					}
				}
				if len(got) != len(want) {
					e.t.Fatalf("the watch delivered %d nodes, want %d", len(got), len(want))
				}
				for k, v := range want {
					if got[k] != v {
						e.t.Fatalf("%s: delivered %d bytes, want %d (or the wrong bytes)", k, len(got[k]), len(v))
					}
				}
			},
		},
		{
			Name:        "Watch/Compacted/Immediate",
			Needs:       NeedsExactHistory + "+" + NeedsCompactor,
			Description: "a watch from a revision the backend no longer keeps fails at once with ErrCompacted",
			run: func(e *env) {
				e.create(e.c0, p("n"), nil, core.Persistent)
				from := e.get(e.c0, p("n")).Stat.CreateRevision
				e.set(e.c0, p("n"), []byte("x"), 0)
				cur := e.get(e.c0, p("n")).Stat.ModifyRevision
				e.store.(Compactor).Compact(e.t, cur)
				_, err := e.c0.Watch(e.ctx, base, from)
				e.is(err, core.ErrCompacted, "watch from compacted revision %d", from)
			},
		},
		{
			Name:        "Watch/Compacted/SnapshotResume",
			Needs:       NeedsExactHistory + "+" + NeedsCompactor,
			Description: "after ErrCompacted, a Snapshot and a watch from its revision + 1 miss nothing: snapshot plus events equal the final state",
			run: func(e *env) {
				for i := 0; i < 5; i++ {
					e.create(e.c0, p(fmt.Sprint("old", i)), []byte("o"), core.Persistent)
				}
				from := e.get(e.c0, p("old0")).Stat.CreateRevision
				e.store.(Compactor).Compact(e.t, e.get(e.c0, p("old4")).Stat.CreateRevision)
				_, err := e.c0.Watch(e.ctx, base, from)
				e.is(err, core.ErrCompacted, "watch from compacted revision %d", from)
				snap, err := e.c0.Snapshot(e.ctx, base)
				e.ok(err, "snapshot")
				state := map[string][]byte{}
				for _, n := range snap.Nodes {
					state[n.Path] = n.Data
				}
				// Writes between the snapshot and the watch must not be lost.
				e.set(e.c0, p("old0"), []byte("changed"), core.AnyVersion)
				ch := e.watch(e.client(), base, snap.Revision+1)
				e.create(e.c0, p("new"), []byte("n"), core.Persistent)
				e.ok(core.Delete(e.ctx, e.c0, p("old1"), core.AnyVersion, core.Fence{}), "delete")
				for _, ev := range e.nextEvents(ch, 3) {
					if ev.Revision <= snap.Revision {
						e.t.Fatalf("event at revision %d, not after the snapshot's %d", ev.Revision, snap.Revision)
					}
					if ev.Type == core.EventDeleted {
						delete(state, ev.Path)
					} else {
						state[ev.Path] = ev.Data
					}
				}
				final, err := e.c0.Snapshot(e.ctx, base)
				e.ok(err, "final snapshot")
				if len(final.Nodes) != len(state) {
					e.t.Fatalf("snapshot + events hold %d nodes, final snapshot %d", len(state), len(final.Nodes))
				}
				for _, n := range final.Nodes {
					if d, ok := state[n.Path]; !ok || !bytes.Equal(d, n.Data) {
						e.t.Fatalf("%s: snapshot + events hold %q (present %v), final snapshot %q", n.Path, d, ok, n.Data)
					}
				}
			},
		},
		{
			Name:        "Watch/MultipleWatchers",
			Needs:       NeedsExactHistory,
			Description: "watchers on different clients see the same events in the same order",
			run: func(e *env) {
				a := e.watch(e.client(), base, 0)
				b := e.watch(e.client(), base, 0)
				for i := 0; i < 5; i++ {
					e.create(e.c0, p(fmt.Sprint("n", i)), nil, core.Persistent)
				}
				ea, eb := e.nextEvents(a, 5), e.nextEvents(b, 5)
				if describeEvents(ea) != describeEvents(eb) {
					e.t.Fatalf("watchers disagree: %s vs %s", describeEvents(ea), describeEvents(eb))
				}
			},
		},
		{
			Name:        "Watch/CancelCloses",
			Description: "a watch channel waiting for events is closed within 5 s when the watch's context ends",
			run: func(e *env) {
				ctx, cancel := context.WithCancel(e.ctx)
				ch, err := e.c0.Watch(ctx, base, 0)
				e.ok(err, "watch")
				cancel()
				closesSoon(e, ch, "its context ended")
			},
		},
		{
			Name:        "Watch/CloseCloses",
			Description: "a watch channel is closed within 5 s when its client closes",
			run: func(e *env) {
				c := e.client()
				ch := e.watch(c, base, 0)
				e.ok(c.Close(), "close")
				closesSoon(e, ch, "its client closed")
			},
		},
	}
}
