package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/metaplane/metaplane/core"
)

// The register model for the linearizability check: the node's data and
// version.
type regState struct {
	val string
	ver int64
}

type regInput struct {
	op  string // "get", "set", "cas"
	val string
	ver int64 // expected version of a cas
}

type regOutput struct {
	val     string
	ver     int64 // version read, or written
	ok      bool  // cas applied
	unknown bool  // the call failed: the outcome of a write is unknown
}

var registerModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{regState{val: "init"}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(regState), input.(regInput), output.(regOutput)
		next := regState{val: in.val, ver: s.ver + 1}
		switch in.op {
		case "get":
			if out.val == s.val && out.ver == s.ver {
				return []any{s}
			}
			return nil
		case "set":
			if out.unknown {
				return []any{s, next}
			}
			if out.ver == s.ver+1 {
				return []any{next}
			}
			return nil
		case "cas":
			if out.unknown {
				if s.ver == in.ver {
					return []any{s, next}
				}
				return []any{s}
			}
			if s.ver == in.ver && out.ok && out.ver == s.ver+1 {
				return []any{next}
			}
			if s.ver != in.ver && !out.ok {
				return []any{s}
			}
			return nil
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		return fmt.Sprintf("%s(%q, v%d) -> %+v", in.op, in.val, in.ver, out)
	},
}

// regHistory records the operations on the register.
type regHistory struct {
	path  string
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

// do runs one operation on the register through c and records it: a
// failed read is left out (it tells nothing), a failed write is recorded
// with an unknown outcome (pending: it may take effect at any time after
// its call, up to the end of the history). lastVer is the client's last
// version seen, the expected version of a cas. It returns the call's
// error (nil for a cas refused with ErrBadVersion, an answer).
func (h *regHistory) do(ctx context.Context, id int, c core.MetadataBackend, op, val string, lastVer *int64) error {
	in := regInput{op: op, val: val}
	var out regOutput
	var callErr error
	call := time.Since(h.start).Nanoseconds()
	switch op {
	case "get":
		n, err := core.Get(ctx, c, h.path)
		if err != nil {
			return err
		}
		out = regOutput{val: string(n.Data), ver: n.Stat.Version}
		*lastVer = n.Stat.Version
	case "set":
		st, err := core.Set(ctx, c, h.path, []byte(val), core.AnyVersion, core.Fence{})
		callErr = err
		if err != nil {
			out.unknown = true
		} else {
			out.ver = st.Version
			*lastVer = st.Version
		}
	case "cas":
		in.ver = *lastVer
		st, err := core.Set(ctx, c, h.path, []byte(val), *lastVer, core.Fence{})
		switch {
		case err == nil:
			out.ok, out.ver = true, st.Version
			*lastVer = st.Version
		case errors.Is(err, core.ErrBadVersion):
			out.ok = false
		default:
			out.unknown, callErr = true, err
		}
	}
	ret := time.Since(h.start).Nanoseconds()
	if out.unknown {
		ret = 1 << 62
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
	return callErr
}

// closedErr returns err if it says the client is closed (the run cannot
// go on with it), else nil.
func closedErr(err error) error {
	if errors.Is(err, core.ErrClosed) {
		return err
	}
	return nil
}

// sequential runs a round in which each client sets the register and the
// next client then reads it, one call after the other: a backend whose
// reads can be stale fails this whatever the timing.
func (h *regHistory) sequential(e *env, cs []core.MetadataBackend, round string, lastVer []int64) {
	e.t.Helper()
	for k := range cs {
		next := (k + 1) % len(cs)
		e.ok(closedErr(h.do(e.ctx, k, cs[k], "set", fmt.Sprintf("%s-%d", round, k), &lastVer[k])), "sequential set")
		e.ok(closedErr(h.do(e.ctx, next, cs[next], "get", "", &lastVer[next])), "sequential get")
	}
}

// linearizable runs concurrent get, set and compare-and-set on one node
// from several clients, between two sequential rounds, and checks the
// history with porcupine. With faults, the property's own goroutine
// injects faults while the clients run (see faultLoop), and some calls
// have deadlines short enough to cut them off.
func linearizable(e *env, faults bool) {
	h := &regHistory{path: p("reg"), start: time.Now()}
	e.create(e.c0, h.path, []byte("init"), core.Persistent)
	cs := e.clients(4)
	const perClient = 40
	lastVer := make([]int64, len(cs))
	h.sequential(e, cs, "before", lastVer)
	if faults {
		awaitTransferTarget(e, cs)
	}
	seed := uint64(time.Now().UnixNano())
	e.t.Logf("seed %d", seed)
	errs := make([]error, len(cs))
	faultReqs := make(chan chan struct{})
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(seed, uint64(i)))
			for j := 0; j < perClient; j++ {
				ctx, cancel := e.ctx, context.CancelFunc(func() {})
				if faults && rnd.IntN(6) == 0 {
					ctx, cancel = context.WithTimeout(e.ctx, time.Duration(rnd.IntN(3000))*time.Microsecond)
				}
				if faults && j%10 == 5 {
					// Ask for a fault and wait until it is in place, so that
					// faults happen amid the calls however fast they are.
					ack := make(chan struct{})
					select {
					case faultReqs <- ack:
						<-ack
					case <-e.ctx.Done():
					}
				}
				op := [...]string{"get", "set", "cas"}[(i+j)%3]
				err := closedErr(h.do(ctx, i, c, op, fmt.Sprintf("c%d-%d", i, j), &lastVer[i]))
				cancel()
				if err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	if faults {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		faultLoop(e, cs, rand.New(rand.NewPCG(seed, 99)), faultReqs, done)
	}
	wg.Wait()
	for i, err := range errs {
		e.ok(err, "client %d", i)
	}
	h.sequential(e, cs, "after", lastVer)
	res := porcupine.CheckOperationsTimeout(registerModel.ToModel(), h.ops, 20*time.Second)
	switch res {
	case porcupine.Illegal:
		e.t.Fatalf("history of %d operations is not linearizable", len(h.ops))
	case porcupine.Unknown:
		e.t.Logf("linearizability check of %d operations timed out; result unknown", len(h.ops))
	}
	if min := 2*len(cs) + len(cs)*perClient/2; len(h.ops) < min {
		e.t.Fatalf("only %d operations completed, want at least %d", len(h.ops), min)
	}
}

// faultLoop injects one fault for each request of the clients' work until
// done is closed, then closes the request's channel: in turn expiring a
// client's session (once), moving the consensus leadership to
// another member (LeadershipTransfer, at most twice), and otherwise, where
// the backend has them (FaultInjection), failing a client's next write or
// giving a client a random latency of up to 3 ms. It runs on the
// property's goroutine (the harness's ExpireSession may fail the property)
// and undoes the latencies at the end.
func faultLoop(e *env, cs []core.MetadataBackend, rnd *rand.Rand, reqs <-chan chan struct{}, done <-chan struct{}) {
	e.t.Helper()
	var injectors []core.FaultInjector
	for _, c := range cs {
		if f, ok := core.Optional[core.FaultInjector](c); ok && e.caps.FaultInjection {
			injectors = append(injectors, f)
		}
	}
	defer func() {
		for _, f := range injectors {
			f.SetLatency(0)
		}
	}()
	expiries, transfers, injected := 0, 0, 0
	for step := 0; ; step++ {
		var ack chan struct{}
		select {
		case <-done:
			e.t.Logf("faults: %d session expiries, %d leadership transfers, %d injected failures and latencies", expiries, transfers, injected)
			return
		case <-e.ctx.Done():
			return
		case ack = <-reqs:
		}
		switch {
		case step%4 == 1 && expiries < 1:
			e.expire(cs[rnd.IntN(len(cs))])
			expiries++
		case step%4 == 3 && transfers < 2 && transferLeadership(e, cs, rnd):
			transfers++
		case len(injectors) > 0:
			f := injectors[rnd.IntN(len(injectors))]
			if rnd.IntN(2) == 0 {
				f.FailNextWrite(fmt.Errorf("%w: injected by the conformance suite", core.ErrUnavailable))
			} else {
				f.SetLatency(time.Duration(rnd.IntN(3000)) * time.Microsecond)
			}
			injected++
		}
		close(ack)
	}
}

// awaitTransferTarget waits, on a backend that declares LeadershipTransfer
// and has several voters, until the leading member knows another voter to
// be caught up (see transferLeadership), so that the faults can move the
// leadership; after the wait bound it logs and goes on without.
func awaitTransferTarget(e *env, cs []core.MetadataBackend) {
	if !e.caps.LeadershipTransfer {
		return
	}
	deadline := time.Now().Add(e.wait)
	for time.Now().Before(deadline) && e.ctx.Err() == nil {
		for _, c := range cs {
			st, err := c.Status(e.ctx)
			if err != nil || st.Role != core.RoleLeader {
				continue
			}
			if len(caughtUpVoters(st)) > 0 {
				return
			}
			voters := 0
			for _, m := range st.Members {
				if m.Kind == core.MemberVoter {
					voters++
				}
			}
			if voters < 2 {
				return // nothing to transfer to
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Logf("no voter known to be caught up within %v: no leadership transfers", e.wait)
}

// caughtUpVoters lists the voters other than st's member that st (the
// leader's) knows to be caught up: reachable, with a known match index (a
// backend may refuse a transfer to one it has no progress of).
func caughtUpVoters(st core.Status) []string {
	var ids []string
	for _, m := range st.Members {
		if m.ID != st.MemberID && m.Kind == core.MemberVoter && m.Reachable && m.MatchIndex > 0 {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// transferLeadership moves the consensus leadership from the member that
// leads to another voter, if the backend declares LeadershipTransfer and
// has another voter known to be caught up; it reports whether the
// leadership moved.
func transferLeadership(e *env, cs []core.MetadataBackend, rnd *rand.Rand) bool {
	if !e.caps.LeadershipTransfer {
		return false
	}
	for _, c := range cs {
		lt, ok := core.Optional[core.LeadershipTransferer](c)
		if !ok {
			return false
		}
		st, err := c.Status(e.ctx)
		if err != nil || st.Role != core.RoleLeader {
			continue
		}
		others := caughtUpVoters(st)
		if len(others) == 0 {
			return false
		}
		to := others[rnd.IntN(len(others))]
		ctx, cancel := context.WithTimeout(e.ctx, e.wait)
		_, err = lt.TransferLeadership(ctx, to)
		cancel()
		e.t.Logf("leadership transfer from %s to %s: %v", st.MemberID, to, err)
		return err == nil
	}
	return false
}
