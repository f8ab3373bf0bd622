package conformance

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/metaplane/metaplane/core"
)

func snapshotProperties() []Property {
	return []Property{
		{
			Name:        "Snapshot/SortedConsistent",
			Description: "a snapshot holds the prefix and every node below it, with data and stat, sorted by path, at a revision no older than the last write",
			run: func(e *env) {
				want := []string{p("b"), p("a", "y"), p("a", "x"), p("a")}
				e.create(e.c0, p("a"), []byte("a"), core.Persistent)
				e.create(e.c0, p("a", "x"), []byte("ax"), core.Persistent)
				e.create(e.c0, p("a", "y"), []byte("ay"), core.Persistent)
				e.create(e.c0, p("b"), []byte("b"), core.Persistent)
				last := e.get(e.c0, p("b")).Stat.CreateRevision
				snap, err := e.client().Snapshot(e.ctx, base)
				e.ok(err, "snapshot")
				var got []string
				for _, n := range snap.Nodes {
					got = append(got, n.Path)
				}
				want = append(want, base)
				sort.Strings(want)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					e.t.Fatalf("snapshot paths %v, want %v", got, want)
				}
				wantData := map[string]string{base: "", p("a"): "a", p("a", "x"): "ax", p("a", "y"): "ay", p("b"): "b"}
				for _, n := range snap.Nodes {
					if string(n.Data) != wantData[n.Path] || n.Stat.DataLength != int32(len(n.Data)) {
						e.t.Fatalf("snapshot node %s holds %q (length %d), want %q", n.Path, n.Data, n.Stat.DataLength, wantData[n.Path])
					}
				}
				if a := snap.Nodes[1]; a.Stat.NumChildren != 2 || a.Stat.CreateRevision <= 0 {
					e.t.Fatalf("snapshot stat of %s: %+v; want 2 children and a create revision", a.Path, a.Stat)
				}
				if snap.Revision < last {
					e.t.Fatalf("snapshot revision %d older than the last write's %d", snap.Revision, last)
				}
			},
		},
		{
			Name:        "Snapshot/Prefix",
			Description: "a snapshot of a prefix leaves out siblings that merely share the name's start",
			run: func(e *env) {
				e.create(e.c0, p("a"), nil, core.Persistent)
				e.create(e.c0, p("a", "x"), nil, core.Persistent)
				e.create(e.c0, p("ab"), nil, core.Persistent)
				snap, err := e.c0.Snapshot(e.ctx, p("a"))
				e.ok(err, "snapshot")
				if len(snap.Nodes) != 2 || snap.Nodes[0].Path != p("a") || snap.Nodes[1].Path != p("a", "x") {
					e.t.Fatalf("snapshot of %s: %d nodes %v", p("a"), len(snap.Nodes), snap.Nodes)
				}
			},
		},
		{
			Name:        "Snapshot/Missing",
			Description: "a snapshot of a prefix that does not exist is empty, with a current revision",
			run: func(e *env) {
				e.create(e.c0, p("n"), nil, core.Persistent)
				last := e.get(e.c0, p("n")).Stat.CreateRevision
				snap, err := e.c0.Snapshot(e.ctx, p("missing"))
				e.ok(err, "snapshot")
				if len(snap.Nodes) != 0 || snap.Revision < last {
					e.t.Fatalf("snapshot of a missing prefix: %d nodes at revision %d (last write %d)", len(snap.Nodes), snap.Revision, last)
				}
			},
		},
	}
}

// wantCanceled fails unless err wraps context.Canceled.
func wantCanceled(e *env, err error, what string) {
	e.t.Helper()
	if !errors.Is(err, context.Canceled) {
		e.t.Fatalf("%s with a cancelled context: got %v, want an error wrapping context.Canceled", what, err)
	}
}

func contextProperties() []Property {
	return []Property{
		{
			Name:        "Context/CancelledReads",
			Description: "reads (GetMany, Children, Snapshot, Leader) with a cancelled context fail with an error wrapping context.Canceled",
			run: func(e *env) {
				ctx, cancel := context.WithCancel(e.ctx)
				cancel()
				_, err := e.c0.GetMany(ctx, []string{base}, core.ReadOptions{})
				wantCanceled(e, err, "GetMany")
				_, _, err = e.c0.Children(ctx, base, core.ReadOptions{})
				wantCanceled(e, err, "Children")
				_, err = e.c0.Snapshot(ctx, base)
				wantCanceled(e, err, "Snapshot")
				_, err = e.c0.Leader(ctx)
				wantCanceled(e, err, "Leader")
			},
		},
		{
			Name:        "Context/CancelledWrite",
			Description: "a transaction with a cancelled context fails with an error wrapping context.Canceled; the client keeps working",
			run: func(e *env) {
				ctx, cancel := context.WithCancel(e.ctx)
				cancel()
				_, err := e.c0.Txn(ctx, []core.Op{core.CreateOp(p("n"), nil, core.Persistent)}, core.TxnOptions{})
				wantCanceled(e, err, "Txn")
				_, _, err = core.Create(e.ctx, e.c0, p("m"), nil, core.CreateOptions{})
				e.ok(err, "create after a cancelled call")
			},
		},
		{
			Name:        "Context/Deadline",
			Description: "a call whose deadline has passed fails with an error wrapping context.DeadlineExceeded",
			run: func(e *env) {
				ctx, cancel := context.WithDeadline(e.ctx, time.Now().Add(-time.Second))
				defer cancel()
				_, err := e.c0.GetMany(ctx, []string{base}, core.ReadOptions{})
				if !errors.Is(err, context.DeadlineExceeded) {
					e.t.Fatalf("GetMany past its deadline: got %v, want context.DeadlineExceeded", err)
				}
			},
		},
	}
}

func closedProperties() []Property {
	return []Property{
		{
			Name:        "Closed/CallsFail",
			Description: "after Close every call fails with ErrClosed, and Close again returns nil",
			run: func(e *env) {
				c := e.client()
				e.ok(c.Close(), "close")
				ctx := e.ctx
				_, err := c.GetMany(ctx, []string{base}, core.ReadOptions{})
				e.is(err, core.ErrClosed, "GetMany")
				_, _, err = c.Children(ctx, base, core.ReadOptions{})
				e.is(err, core.ErrClosed, "Children")
				_, err = c.Snapshot(ctx, base)
				e.is(err, core.ErrClosed, "Snapshot")
				_, err = c.Txn(ctx, []core.Op{core.CreateOp(p("n"), nil, core.Persistent)}, core.TxnOptions{})
				e.is(err, core.ErrClosed, "Txn")
				_, err = c.Watch(ctx, base, 0)
				e.is(err, core.ErrClosed, "Watch")
				_, err = c.SessionEvents(ctx)
				e.is(err, core.ErrClosed, "SessionEvents")
				_, err = c.Campaign(ctx, core.Candidate{ID: "x"})
				e.is(err, core.ErrClosed, "Campaign")
				_, err = c.Leader(ctx)
				e.is(err, core.ErrClosed, "Leader")
				_, err = c.ObserveLeader(ctx)
				e.is(err, core.ErrClosed, "ObserveLeader")
				_, err = c.Status(ctx)
				e.is(err, core.ErrClosed, "Status")
				e.ok(c.Close(), "second close")
				e.mustNotExist(e.c0, p("n"))
			},
		},
		{
			Name:        "Closed/OthersUnaffected",
			Description: "closing one client leaves the other clients of the store working",
			run: func(e *env) {
				a, b := e.client(), e.client()
				e.ok(a.Close(), "close")
				e.create(b, p("n"), []byte("x"), core.Persistent)
				e.data(e.c0, p("n"), []byte("x"))
			},
		},
	}
}

// leaseHolder opens a client, elects it leader and returns it with its
// LeaseManager and leadership: leases are granted by the leader (on Raft
// only the leader's member can), under its fence.
func leaseHolder(e *env) (core.MetadataBackend, core.LeaseManager, core.Leadership) {
	e.t.Helper()
	c := e.client()
	m, ok := core.Optional[core.LeaseManager](c)
	if !ok {
		e.t.Fatalf("backend declares Leases but its client does not implement core.LeaseManager")
	}
	return c, m, e.campaign(c, "lease-holder")
}

func leaseProperties() []Property {
	leased := func(e *env, c core.MetadataBackend, path string, lease int64) {
		e.t.Helper()
		_, _, err := core.Create(e.ctx, c, path, nil, core.CreateOptions{Mode: core.Ephemeral, Lease: lease})
		e.ok(err, "create %s under lease %d", path, lease)
	}
	return []Property{
		{
			Name:        "Lease/Revoke",
			Needs:       NeedsLeases,
			Description: "a lease's ephemeral nodes are visible to all and belong to the lease, not the session; revoking it deletes them",
			run: func(e *env) {
				c, m, l := leaseHolder(e)
				id, err := m.GrantLease(e.ctx, "ts-1", 30*time.Second, l.Fence())
				e.ok(err, "grant")
				leased(e, c, p("l1"), id)
				leased(e, c, p("l2"), id)
				e.create(c, p("own"), nil, core.Ephemeral)
				if n := e.get(e.c0, p("l1")); n.Stat.EphemeralOwner == 0 || n.Stat.EphemeralOwner == c.Session().ID {
					e.t.Fatalf("lease ephemeral owned by %#x (session %#x): want the lease, not the session", n.Stat.EphemeralOwner, c.Session().ID)
				}
				e.ok(m.RevokeLease(e.ctx, id, l.Fence()), "revoke")
				e.gone(e.c0, p("l1"))
				e.gone(e.c0, p("l2"))
				e.mustExist(e.c0, p("own"))
				e.is(m.RenewLease(e.ctx, id), core.ErrSessionExpired, "renew of a revoked lease")
				e.is(m.RevokeLease(e.ctx, id, l.Fence()), core.ErrSessionExpired, "second revoke")
			},
		},
		{
			Name:        "Lease/OutlivesSession",
			Needs:       NeedsLeases,
			Description: "a lease's ephemerals, created by any client, survive the end of that client's session",
			run: func(e *env) {
				_, m, l := leaseHolder(e)
				id, err := m.GrantLease(e.ctx, "ts-1", 30*time.Second, l.Fence())
				e.ok(err, "grant")
				c := e.client()
				leased(e, c, p("l"), id)
				e.create(c, p("own"), nil, core.Ephemeral)
				e.ok(c.Close(), "close")
				e.gone(e.c0, p("own"))
				e.mustExist(e.c0, p("l"))
			},
		},
		{
			Name:        "Lease/Expire",
			Needs:       NeedsLeases,
			Description: "a lease not renewed within its ttl expires: its ephemerals go, renewing fails with ErrSessionExpired and so does a create under it",
			run: func(e *env) {
				c, m, l := leaseHolder(e)
				id, err := m.GrantLease(e.ctx, "ts-1", 500*time.Millisecond, l.Fence())
				e.ok(err, "grant")
				leased(e, c, p("l"), id)
				e.gone(e.c0, p("l"))
				e.is(m.RenewLease(e.ctx, id), core.ErrSessionExpired, "renew of an expired lease")
				_, _, err = core.Create(e.ctx, c, p("late"), nil, core.CreateOptions{Mode: core.Ephemeral, Lease: id})
				e.is(err, core.ErrSessionExpired, "create under an expired lease")
			},
		},
		{
			Name:        "Lease/Renew",
			Needs:       NeedsLeases,
			Description: "a lease renewed within its ttl outlives several ttls",
			run: func(e *env) {
				c, m, l := leaseHolder(e)
				ttl := time.Second
				id, err := m.GrantLease(e.ctx, "ts-1", ttl, l.Fence())
				e.ok(err, "grant")
				leased(e, c, p("l"), id)
				end := time.Now().Add(3 * ttl)
				for time.Now().Before(end) {
					e.ok(m.RenewLease(e.ctx, id), "renew")
					time.Sleep(ttl / 5)
				}
				e.mustExist(e.c0, p("l"))
				e.ok(m.RevokeLease(e.ctx, id, l.Fence()), "revoke")
			},
		},
		{
			Name:        "Lease/Fenced",
			Needs:       NeedsLeases,
			Description: "granting or revoking a lease under a stale fence fails with ErrFenced; under the current fence it works",
			run: func(e *env) {
				_, m, l := leaseHolder(e)
				id, err := m.GrantLease(e.ctx, "ts-1", 30*time.Second, l.Fence())
				e.ok(err, "grant under the current fence")
				e.ok(l.Resign(e.ctx), "resign")
				_, err = m.GrantLease(e.ctx, "ts-2", 30*time.Second, l.Fence())
				e.is(err, core.ErrFenced, "grant under a stale fence")
				e.is(m.RevokeLease(e.ctx, id, l.Fence()), core.ErrFenced, "revoke under a stale fence")
				e.ok(m.RenewLease(e.ctx, id), "renew: the lease is still there")
			},
		},
		{
			Name:        "Lease/InvalidTTL",
			Needs:       NeedsLeases,
			Description: "a lease with a ttl of zero or less is refused with ErrInvalidArgument",
			run: func(e *env) {
				_, m, l := leaseHolder(e)
				for _, ttl := range []time.Duration{0, -time.Second} {
					_, err := m.GrantLease(e.ctx, "ts", ttl, l.Fence())
					e.is(err, core.ErrInvalidArgument, "grant with ttl %v", ttl)
				}
			},
		},
	}
}

func faultProperties() []Property {
	return []Property{
		{
			Name:        "Faults/FailNextWrite",
			Needs:       NeedsFaultInjection,
			Description: "FailNextWrite makes exactly the next write fail with the given error, changing nothing",
			run: func(e *env) {
				f, _ := core.Optional[core.FaultInjector](e.c0)
				f.FailNextWrite(core.ErrUnavailable)
				_, _, err := core.Create(e.ctx, e.c0, p("n"), nil, core.CreateOptions{})
				e.is(err, core.ErrUnavailable, "the failed write")
				e.mustNotExist(e.c0, p("n"))
				e.create(e.c0, p("n"), nil, core.Persistent)
			},
		},
		{
			Name:        "Faults/Latency",
			Needs:       NeedsFaultInjection,
			Description: "SetLatency delays calls by at least the latency; a context ending during the delay ends the call",
			run: func(e *env) {
				f, _ := core.Optional[core.FaultInjector](e.c0)
				f.SetLatency(100 * time.Millisecond)
				start := time.Now()
				e.get(e.c0, base)
				if d := time.Since(start); d < 100*time.Millisecond {
					e.t.Fatalf("a read took %v under 100ms of injected latency", d)
				}
				f.SetLatency(time.Hour)
				ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
				defer cancel()
				_, err := core.Get(ctx, e.c0, base)
				if !errors.Is(err, context.DeadlineExceeded) {
					e.t.Fatalf("a read under an hour of latency with a 50ms deadline: got %v", err)
				}
				f.SetLatency(0)
				e.get(e.c0, base)
			},
		},
	}
}

func statusProperties() []Property {
	return []Property{
		{
			Name:        "Status/Basic",
			Description: "Status answers with the backend's name and a revision no older than the client's last write",
			run: func(e *env) {
				e.create(e.c0, p("n"), nil, core.Persistent)
				last := e.get(e.c0, p("n")).Stat.CreateRevision
				st, err := e.c0.Status(e.ctx)
				e.ok(err, "status")
				if st.Backend == "" || st.Revision < last {
					e.t.Fatalf("status %+v: want a backend name and a revision >= %d", st, last)
				}
			},
		},
		{
			Name:        "Capabilities/Stable",
			Description: "Capabilities names the backend, declares a non-negative MaxValueSize, is the same for every client and every call, and is consistent: core.Optional finds each part it declares (Leases, NativeIDAllocation, Membership, FaultInjection, SessionExpiry), and TabletServers through the coordinator comes with Leases and ExactHistory",
			run: func(e *env) {
				a, b := e.c0.Capabilities(), e.client().Capabilities()
				if a.Name == "" || a.MaxValueSize < 0 {
					e.t.Fatalf("capabilities %+v: want a name and MaxValueSize >= 0", a)
				}
				if a != b || a != e.c0.Capabilities() {
					e.t.Fatalf("capabilities differ: %+v vs %+v", a, b)
				}
				if a.Leases {
					if _, ok := core.Optional[core.LeaseManager](e.c0); !ok {
						e.t.Fatalf("declares Leases but does not implement core.LeaseManager")
					}
				}
				if a.NativeIDAllocation {
					if _, ok := core.Optional[core.IDAllocator](e.c0); !ok {
						e.t.Fatalf("declares NativeIDAllocation but does not implement core.IDAllocator")
					}
				}
				if a.Membership {
					if _, ok := core.Optional[core.MembershipManager](e.c0); !ok {
						e.t.Fatalf("declares Membership but does not implement core.MembershipManager")
					}
				}
				if a.FaultInjection {
					if _, ok := core.Optional[core.FaultInjector](e.c0); !ok {
						e.t.Fatalf("declares FaultInjection but does not implement core.FaultInjector")
					}
				}
				if a.SessionExpiry {
					if _, ok := core.Optional[core.SessionExpirer](e.c0); !ok {
						e.t.Fatalf("declares SessionExpiry but does not implement core.SessionExpirer")
					}
				}
				if a.TabletServers == core.TabletServersThroughCoordinator && (!a.Leases || !a.ExactHistory) {
					e.t.Fatalf("declares TabletServers %v, which needs Leases and ExactHistory, but declares Leases %v, ExactHistory %v", a.TabletServers, a.Leases, a.ExactHistory)
				}
			},
		},
		{
			Name:        "Errors/SentinelsReachable",
			Description: "every sentinel the contract lets a client provoke on a healthy store comes back from the call that provokes it, through errors.Is (ErrNotLeader and ErrUnavailable need a follower or a failure: the Raft, ZooKeeper and plugin tests provoke them)",
			run: func(e *env) {
				c := e.client()
				e.create(c, p("n"), nil, core.Persistent)
				e.create(c, p("n", "child"), nil, core.Persistent)
				e.create(c, p("eph"), nil, core.Ephemeral)
				l := e.campaign(c, "a")
				var errLease error
				if m, ok := core.Optional[core.LeaseManager](c); ok && e.caps.Leases {
					// While c leads: on some backends only the leader
					// answers for leases.
					errLease = m.RenewLease(e.ctx, 0x7eadbeef)
				}
				e.ok(l.Resign(e.ctx), "resign")
				_, _, errNoParent := core.Create(e.ctx, c, p("eph", "x"), nil, core.CreateOptions{})
				_, errFenced := core.Set(e.ctx, c, p("n"), nil, core.AnyVersion, l.Fence())
				_, errNotFound := core.Get(e.ctx, c, p("missing"))
				_, _, errExists := core.Create(e.ctx, c, p("n"), nil, core.CreateOptions{})
				_, errBadVersion := core.Set(e.ctx, c, p("n"), nil, 5, core.Fence{})
				errNotEmpty := core.Delete(e.ctx, c, p("n"), core.AnyVersion, core.Fence{})
				_, errInvalidPath := core.Get(e.ctx, c, "no-slash")
				_, errInvalidArg := c.Txn(e.ctx, nil, core.TxnOptions{})
				_, errTooLarge := core.Set(e.ctx, c, p("n"), make([]byte, e.maxValueSize()+1), core.AnyVersion, core.Fence{})
				checks := []struct {
					err, want error
				}{
					{errNotFound, core.ErrNotFound}, {errExists, core.ErrNodeExists}, {errBadVersion, core.ErrBadVersion},
					{errNotEmpty, core.ErrNotEmpty}, {errNoParent, core.ErrNoParent}, {errFenced, core.ErrFenced},
					{errTooLarge, core.ErrTooLarge}, {errInvalidPath, core.ErrInvalidPath}, {errInvalidArg, core.ErrInvalidArgument},
				}
				if _, ok := core.Optional[core.LeaseManager](c); ok && e.caps.Leases {
					checks = append(checks, struct{ err, want error }{errLease, core.ErrSessionExpired})
				}
				if e.caps.ExactHistory {
					if comp, ok := e.store.(Compactor); ok {
						cur := e.get(c, p("n")).Stat.CreateRevision
						e.set(c, p("n"), nil, core.AnyVersion)
						comp.Compact(e.t, e.get(c, p("n")).Stat.ModifyRevision)
						_, err := c.Watch(e.ctx, base, cur)
						checks = append(checks, struct{ err, want error }{err, core.ErrCompacted})
					}
				}
				e.ok(c.Close(), "close")
				_, errClosed := core.Get(e.ctx, c, base)
				checks = append(checks, struct{ err, want error }{errClosed, core.ErrClosed})
				for _, ch := range checks {
					if !errors.Is(ch.err, ch.want) {
						e.t.Errorf("want %v, got %v", ch.want, ch.err)
					}
					// A sentinel must not match another sentinel.
					for _, other := range core.Sentinels {
						if other != ch.want && errors.Is(ch.err, other) {
							e.t.Errorf("error %v matches %v as well as %v", ch.err, other, ch.want)
						}
					}
				}
			},
		},
	}
}
