package conformance

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/metaplane/metaplane/core"
)

// slowConsumerProperties: a watcher that does not read.
func slowConsumerProperties() []Property {
	return []Property{
		{
			Name:        "Watch/SlowConsumer",
			Description: "a watcher that reads nothing while 300 changes of 1 KiB are written holds back neither the writers nor another watcher, which follows them as they come; when it reads at last it ends with the latest state (having lost at most the oldest events, through a Reset or ErrCompacted and a new snapshot)",
			run: func(e *env) {
				const keys, txns = 10, 30
				for k := 0; k < keys; k++ {
					e.create(e.c0, p(fmt.Sprint("k", k)), nil, core.Persistent)
				}
				slow, release := e.followLater(e.client(), base)
				defer release()
				fast := e.follow(e.client(), base)
				value := make([]byte, 1024)
				writer := e.client()
				start := time.Now()
				for i := 0; i < txns; i++ {
					ops := make([]core.Op, keys)
					for k := range ops {
						copy(value, fmt.Sprintf("txn %d key %d", i, k))
						ops[k] = core.SetOp(p(fmt.Sprint("k", k)), value, core.AnyVersion)
					}
					ctx, cancel := context.WithTimeout(e.ctx, e.wait)
					res, err := writer.Txn(ctx, ops, core.TxnOptions{})
					cancel()
					e.ok(err, "transaction %d while a watcher reads nothing", i)
					// Paced by the watcher that reads: each transaction is
					// written once it has seen the one before, so the one
					// that reads nothing has been sent its events too
					// (a store that holds writers back for it then shows).
					fast.reaches(res.Revision, fmt.Sprintf("transaction %d", i))
					if time.Since(start) > e.wait {
						e.t.Fatalf("%d transactions took more than %v while a watcher read nothing: writers are held back", i+1, e.wait)
					}
				}
				fast.converges("the watcher that reads")
				release()
				slow.converges("the watcher that read nothing until the end")
			},
		},
		{
			Name:        "Election/ObserveLeader/SlowConsumer",
			Description: "an observer that reads nothing while five leaders come and go holds back no election, and when it reads at last it reaches the current leader",
			run: func(e *env) {
				obs, err := e.client().ObserveLeader(e.ctx)
				e.ok(err, "observe leader")
				c := e.client()
				for i := 0; i < 4; i++ {
					e.ok(e.campaign(c, fmt.Sprint("leader-", i)).Resign(e.ctx), "resign of leader-%d", i)
				}
				last := e.campaign(c, "last")
				timeout := time.After(e.wait)
				for {
					select {
					case l, ok := <-obs:
						if !ok {
							e.t.Fatalf("the observation closed before it reached the current leader")
						}
						if l.ID == "last" && l.Epoch == last.Epoch() {
							return
						}
					case <-timeout:
						e.t.Fatalf("the slow observer did not reach the current leader (last, epoch %d) within %v", last.Epoch(), e.wait)
					}
				}
			},
		},
		{
			Name:        "Session/Events/SlowConsumer",
			Description: "a session-event subscriber that reads nothing while its session expires holds nothing back (the client carries on with a new session and writes), and when it reads at last it reaches the current session's SessionConnected",
			run: func(e *env) {
				c := e.client()
				events, err := c.SessionEvents(e.ctx)
				e.ok(err, "session events")
				old := c.Session().ID
				e.expire(c)
				e.eventually("a new session", func() bool {
					s := c.Session()
					return s.ID != old && s.State == core.SessionConnected
				})
				e.create(c, p("after-expiry"), nil, core.Ephemeral)
				want := c.Session().ID
				timeout := time.After(e.wait)
				for {
					select {
					case ev, ok := <-events:
						if !ok {
							e.t.Fatalf("the session events closed before the current session's SessionConnected")
						}
						if ev.State == core.SessionConnected && ev.SessionID == want {
							return
						}
					case <-timeout:
						e.t.Fatalf("the slow subscriber did not reach SessionConnected of session %#x within %v", want, e.wait)
					}
				}
			},
		},
	}
}

// statusOf returns c's status, failing the property on an error.
func (e *env) statusOf(c core.MetadataBackend) core.Status {
	e.t.Helper()
	st, err := c.Status(e.ctx)
	e.ok(err, "status")
	return st
}

// voterSet describes the members of st: "id at address (kind)", sorted.
func voterSet(st core.Status) string {
	var ms []string
	for _, m := range st.Members {
		ms = append(ms, fmt.Sprintf("%s at %s (%s)", m.ID, m.Address, m.Kind))
	}
	sort.Strings(ms)
	return strings.Join(ms, ", ")
}

// freshMemberID returns a member id not in st's members, shaped like
// theirs: one above the largest when they are numbers.
func freshMemberID(st core.Status, n int) string {
	most, numeric := 0, len(st.Members) > 0
	for _, m := range st.Members {
		v, err := strconv.Atoi(m.ID)
		if err != nil {
			numeric = false
			break
		}
		most = max(most, v)
	}
	if numeric {
		return strconv.Itoa(most + 100 + n)
	}
	return fmt.Sprintf("conformance-member-%d", n)
}

// leadingMember finds, among cs, a client of the member that leads the
// consensus, with its status, waiting for one to lead.
func (e *env) leadingMember(cs []core.MetadataBackend) (core.MetadataBackend, core.Status) {
	e.t.Helper()
	var leader core.MetadataBackend
	var st core.Status
	e.eventually("a member that leads", func() bool {
		for _, c := range cs {
			if s, err := c.Status(e.ctx); err == nil && s.Role == core.RoleLeader {
				leader, st = c, s
				return true
			}
		}
		return false
	})
	return leader, st
}

func memberProperties() []Property {
	return []Property{
		{
			Name:        "Read/Linearizable/EveryMember",
			Needs:       NeedsFollowerReads,
			Description: "a write acknowledged through any client (on a replicated store: any member, leader or follower) is seen by a read started after it through every other client",
			run: func(e *env) {
				cs := append([]core.MetadataBackend{e.c0}, e.clients(3)...)
				e.create(e.c0, p("k"), nil, core.Persistent)
				for round := 0; round < 2; round++ {
					for w, writer := range cs {
						want := fmt.Sprintf("round %d by client %d", round, w)
						st := e.set(writer, p("k"), []byte(want), core.AnyVersion)
						for r, reader := range cs {
							if r == w {
								continue
							}
							n := e.get(reader, p("k"))
							if string(n.Data) != want || n.Stat.Version != st.Version {
								e.t.Fatalf("client %d read %q (version %d) after client %d's write of %q (version %d) had returned", r, n.Data, n.Stat.Version, w, want, st.Version)
							}
						}
					}
				}
			},
		},
		{
			Name:        "Membership/Refusals",
			Needs:       NeedsMembership,
			Description: "membership changes refused change nothing: on a follower both fail with ErrNotLeader; on the leader an existing id or address, removing the leader itself or a non-member, and adding a member that never catches up (within a 4 s deadline) fail with ErrInvalidArgument; the voter set stays as it was",
			run: func(e *env) {
				cs := append([]core.MetadataBackend{e.c0}, e.clients(2)...)
				leader, st := e.leadingMember(cs)
				before := voterSet(st)
				mm, _ := core.Optional[core.MembershipManager](leader)
				for _, c := range cs {
					if fst := e.statusOf(c); fst.MemberID != st.MemberID && fst.Role == core.RoleFollower {
						fm, _ := core.Optional[core.MembershipManager](c)
						e.is(fm.AddVoter(e.ctx, freshMemberID(st, 1), "127.0.0.1:1"), core.ErrNotLeader, "AddVoter on follower %s", fst.MemberID)
						e.is(fm.RemoveVoter(e.ctx, st.MemberID), core.ErrNotLeader, "RemoveVoter on follower %s", fst.MemberID)
						break
					}
				}
				some := st.Members[len(st.Members)-1]
				e.is(mm.AddVoter(e.ctx, some.ID, "127.0.0.1:1"), core.ErrInvalidArgument, "AddVoter of existing id %s", some.ID)
				e.is(mm.AddVoter(e.ctx, freshMemberID(st, 2), some.Address), core.ErrInvalidArgument, "AddVoter of existing address %s", some.Address)
				e.is(mm.RemoveVoter(e.ctx, st.MemberID), core.ErrInvalidArgument, "RemoveVoter of the leader %s", st.MemberID)
				e.is(mm.RemoveVoter(e.ctx, freshMemberID(st, 3)), core.ErrInvalidArgument, "RemoveVoter of a non-member")
				ctx, cancel := context.WithTimeout(e.ctx, e.h.scale(4*time.Second))
				defer cancel()
				e.is(mm.AddVoter(ctx, freshMemberID(st, 4), "127.0.0.1:2"), core.ErrInvalidArgument, "AddVoter of a member that never catches up")
				if after := voterSet(e.statusOf(leader)); after != before {
					e.t.Fatalf("refused membership changes changed the members: %s, were %s", after, before)
				}
			},
		},
		{
			Name:        "Membership/AddRemove",
			Needs:       NeedsMembership + "+" + NeedsSpareMember,
			Description: "a voter added on the leader (a spare member from the harness) is listed as a voter at its address, catches up (its client reads a write made before and one made after the add) and is known to the leader as reachable with a match index; removed again, the voter set is the one before",
			run: func(e *env) {
				cs := append([]core.MetadataBackend{e.c0}, e.clients(2)...)
				e.create(e.c0, p("before-add"), []byte("x"), core.Persistent)
				leader, st := e.leadingMember(cs)
				before := voterSet(st)
				mm, _ := core.Optional[core.MembershipManager](leader)
				id, addr, start := e.store.(SpareMaker).SpareMember(e.t)
				added := make(chan error, 1)
				go func() { added <- mm.AddVoter(e.ctx, id, addr) }()
				var addErr error
				returned := false
				listed := time.Now().Add(e.h.scale(2 * time.Second))
				for !returned && time.Now().Before(listed) && e.ctx.Err() == nil {
					if slices.ContainsFunc(e.statusOf(leader).Members, func(m core.MemberStatus) bool { return m.ID == id }) {
						break
					}
					select {
					case addErr = <-added:
						returned = true
					case <-time.After(20 * time.Millisecond):
					}
				}
				spare := start()
				if !returned {
					select {
					case addErr = <-added:
					case <-e.ctx.Done():
						e.t.Fatalf("AddVoter(%s, %s) did not return within the property's deadline", id, addr)
					}
				}
				e.ok(addErr, "AddVoter(%s, %s) of a started spare member", id, addr)
				member := func(st core.Status) (core.MemberStatus, bool) {
					i := slices.IndexFunc(st.Members, func(m core.MemberStatus) bool { return m.ID == id })
					if i < 0 {
						return core.MemberStatus{}, false
					}
					return st.Members[i], true
				}
				if m, ok := member(e.statusOf(leader)); !ok || m.Kind != core.MemberVoter || m.Address != addr {
					e.t.Fatalf("after AddVoter(%s, %s) the leader lists %s, want it a voter at its address", id, addr, voterSet(e.statusOf(leader)))
				}
				e.create(leader, p("after-add"), []byte("y"), core.Persistent)
				e.eventually("the new voter to read the writes made before and after its add", func() bool {
					rs, err := spare.GetMany(e.ctx, []string{p("before-add"), p("after-add")}, core.ReadOptions{})
					return err == nil && rs[0].Err == nil && rs[1].Err == nil
				})
				e.eventually("the leader to know the new voter reachable with a match index", func() bool {
					m, ok := member(e.statusOf(leader))
					return ok && m.Reachable && m.MatchIndex > 0
				})
				e.ok(mm.RemoveVoter(e.ctx, id), "RemoveVoter(%s)", id)
				e.eventually("the voter set to be the one before the add", func() bool {
					return voterSet(e.statusOf(leader)) == before
				})
			},
		},
		{
			Name:        "Status/Fields",
			Description: "Status names the backend as Capabilities does, with a known role, an applied index no greater than the commit index and a revision that never goes back and covers the client's writes; members have distinct ids; with ConsensusStatus every member reports itself among the members, one leader known to all, and an epoch above 0",
			run: func(e *env) {
				cs := append([]core.MetadataBackend{e.c0}, e.clients(2)...)
				roles := []core.Role{core.RoleLeader, core.RoleFollower, core.RoleCandidate, core.RoleObserver, core.RoleStandalone}
				for i, c := range cs {
					_, res, err := core.Create(e.ctx, c, p(fmt.Sprint("n", i)), nil, core.CreateOptions{})
					e.ok(err, "create")
					st := e.statusOf(c)
					if st.Backend != e.caps.Name {
						e.t.Errorf("status names the backend %q, Capabilities %q", st.Backend, e.caps.Name)
					}
					if !slices.Contains(roles, st.Role) {
						e.t.Errorf("status role %q is none of %v", st.Role, roles)
					}
					if st.AppliedIndex > st.CommitIndex || st.AppliedIndex < 0 {
						e.t.Errorf("status applied index %d, commit index %d: want 0 <= applied <= commit", st.AppliedIndex, st.CommitIndex)
					}
					if st.Revision < res.CreateRevision {
						e.t.Errorf("status revision %d older than the client's write at %d", st.Revision, res.CreateRevision)
					}
					if again := e.statusOf(c); again.Revision < st.Revision {
						e.t.Errorf("status revision went back from %d to %d", st.Revision, again.Revision)
					}
					ids := map[string]bool{}
					for _, m := range st.Members {
						if m.ID == "" || ids[m.ID] {
							e.t.Errorf("status members %+v: an empty or repeated id %q", st.Members, m.ID)
						}
						ids[m.ID] = true
					}
				}
				if !e.caps.ConsensusStatus {
					return
				}
				_, lst := e.leadingMember(cs)
				if lst.Epoch <= 0 || lst.LeaderID != lst.MemberID {
					e.t.Errorf("the leading member's status: epoch %d, leader %q, member %q; want an epoch above 0 and itself as leader", lst.Epoch, lst.LeaderID, lst.MemberID)
				}
				for _, c := range cs {
					var st core.Status
					e.eventually("every member to know the leader", func() bool {
						st = e.statusOf(c)
						return st.LeaderID == lst.LeaderID
					})
					if !slices.ContainsFunc(st.Members, func(m core.MemberStatus) bool { return m.ID == st.MemberID }) {
						e.t.Errorf("member %q is not among its own status's members %+v", st.MemberID, st.Members)
					}
					if st.Epoch < lst.Epoch && st.LeaderID == lst.LeaderID {
						e.t.Errorf("member %q reports epoch %d under leader %q, whose own is %d", st.MemberID, st.Epoch, lst.LeaderID, lst.Epoch)
					}
				}
			},
		},
		{
			Name:        "Session/Timeout/Reported",
			Description: "a client's session reports the timeout it asked for, within 25%, for 4 s and 12 s",
			run: func(e *env) {
				for _, want := range []time.Duration{4 * time.Second, 12 * time.Second} {
					c := e.store.NewClient(e.t, ClientOptions{SessionTimeout: want})
					got := c.Session().Timeout
					if got < want*3/4 || got > want*5/4 {
						e.t.Errorf("asked for a session timeout of %v, got %v", want, got)
					}
				}
			},
		},
	}
}
