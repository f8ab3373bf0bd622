package conformance

import (
	"errors"
	"sort"
	"strconv"
	"sync"

	"github.com/metaplane/metaplane/core"
)

type idRange struct{ first, n int64 }

// noOverlap fails if any two ranges share an id.
func noOverlap(e *env, rs []idRange) {
	e.t.Helper()
	sort.Slice(rs, func(i, j int) bool { return rs[i].first < rs[j].first })
	for i := 1; i < len(rs); i++ {
		if prev := rs[i-1]; prev.first+prev.n > rs[i].first {
			e.t.Fatalf("id ranges overlap: [%d, %d) and [%d, %d)", prev.first, prev.first+prev.n, rs[i].first, rs[i].first+rs[i].n)
		}
	}
}

func idProperties() []Property {
	counter := p("ids", "counter")
	return []Property{
		{
			Name:        "IDs/Allocate/Contiguous",
			Description: "AllocateIDs on a missing counter starts at 0 and hands out contiguous ranges; the counter node holds the next id as 8 big-endian bytes",
			run: func(e *env) {
				first, err := core.AllocateIDs(e.ctx, e.c0, counter, 10, core.Fence{})
				e.ok(err, "allocate 10")
				second, err := core.AllocateIDs(e.ctx, e.client(), counter, 5, core.Fence{})
				e.ok(err, "allocate 5")
				if first != 0 || second != 10 {
					e.t.Fatalf("ranges start at %d and %d, want 0 and 10", first, second)
				}
				v, err := core.DecodeCounter(e.get(e.c0, counter).Data)
				e.ok(err, "decode counter")
				if v != 15 {
					e.t.Fatalf("counter holds %d, want 15", v)
				}
			},
		},
		{
			Name:        "IDs/Native/Contiguous",
			Needs:       NeedsNativeIDs,
			Description: "a backend's own IDAllocator starts a missing counter at 0, hands out contiguous ranges, refuses a count below 1 with ErrInvalidArgument and a stale fence with ErrFenced",
			run: func(e *env) {
				a, _ := core.Optional[core.IDAllocator](e.c0)
				first, err := a.AllocateIDs(e.ctx, counter, 7, core.Fence{})
				e.ok(err, "allocate 7")
				second, err := a.AllocateIDs(e.ctx, counter, 3, core.Fence{})
				e.ok(err, "allocate 3")
				if first != 0 || second != 7 {
					e.t.Fatalf("ranges start at %d and %d, want 0 and 7", first, second)
				}
				_, err = a.AllocateIDs(e.ctx, counter, 0, core.Fence{})
				e.is(err, core.ErrInvalidArgument, "allocate 0")
				l := e.campaign(e.c0, "a")
				e.ok(l.Resign(e.ctx), "resign")
				_, err = a.AllocateIDs(e.ctx, counter, 1, l.Fence())
				e.is(err, core.ErrFenced, "allocate under a stale fence")
				v, err := core.DecodeCounter(e.get(e.c0, counter).Data)
				e.ok(err, "decode counter")
				if v != 10 {
					e.t.Fatalf("counter holds %d, want 10", v)
				}
			},
		},
		{
			Name:        "IDs/Allocate/InvalidCount",
			Description: "allocating fewer than one id fails with ErrInvalidArgument",
			run: func(e *env) {
				for _, n := range []int64{0, -3} {
					_, err := core.AllocateIDs(e.ctx, e.c0, counter, n, core.Fence{})
					e.is(err, core.ErrInvalidArgument, "allocate %d", n)
				}
			},
		},
		{
			Name:        "IDs/Allocate/ConcurrentNoOverlap",
			Description: "ranges allocated concurrently from several clients never overlap, and together they cover the counter exactly",
			run: func(e *env) {
				cs := e.clients(4)
				var mu sync.Mutex
				var rs []idRange
				errs := make([]error, len(cs))
				parallel(len(cs), func(i int) {
					for j := 0; j < 10; j++ {
						n := int64(1 + (i+j)%7)
						first, err := core.AllocateIDs(e.ctx, cs[i], counter, n, core.Fence{})
						if err != nil {
							errs[i] = err
							return
						}
						mu.Lock()
						rs = append(rs, idRange{first, n})
						mu.Unlock()
					}
				})
				for i, err := range errs {
					e.ok(err, "allocator %d", i)
				}
				noOverlap(e, rs)
				var total int64
				for _, r := range rs {
					total += r.n
				}
				v, err := core.DecodeCounter(e.get(e.c0, counter).Data)
				e.ok(err, "decode counter")
				if v != total {
					e.t.Fatalf("counter holds %d after handing out %d ids from 0", v, total)
				}
			},
		},
		{
			Name:        "IDs/BlockAllocator/ConcurrentNoOverlap",
			Description: "core.BlockAllocator instances on several clients, used concurrently, never hand out the same id",
			run: func(e *env) {
				cs := e.clients(3)
				var mu sync.Mutex
				var rs []idRange
				errs := make([]error, len(cs))
				parallel(len(cs), func(i int) {
					a := core.NewBlockAllocator(cs[i], counter, 10)
					for j := 0; j < 30; j++ {
						n := int64(1 + j%4)
						first, err := a.Next(e.ctx, n, core.Fence{})
						if err != nil {
							errs[i] = err
							return
						}
						mu.Lock()
						rs = append(rs, idRange{first, n})
						mu.Unlock()
					}
				})
				for i, err := range errs {
					e.ok(err, "allocator %d", i)
				}
				noOverlap(e, rs)
			},
		},
		{
			Name:        "IDs/AcrossLeaderChange",
			Description: "ids allocated under successive leaders' fences never overlap, and the old leader's fence can no longer allocate",
			run: func(e *env) {
				a, b := e.client(), e.client()
				la := e.campaign(a, "a")
				allocA := core.NewBlockAllocator(a, counter, 10)
				var rs []idRange
				for j := 0; j < 5; j++ {
					first, err := allocA.Next(e.ctx, 3, la.Fence())
					e.ok(err, "leader a allocates")
					rs = append(rs, idRange{first, 3})
				}
				waiting := campaignAsync(e.ctx, b, "b")
				e.ok(la.Resign(e.ctx), "resign")
				r := <-waiting
				e.ok(r.err, "campaign of b")
				allocB := core.NewBlockAllocator(b, counter, 10)
				for j := 0; j < 5; j++ {
					first, err := allocB.Next(e.ctx, 3, r.l.Fence())
					e.ok(err, "leader b allocates")
					rs = append(rs, idRange{first, 3})
				}
				_, err := core.AllocateIDs(e.ctx, a, counter, 1, la.Fence())
				e.is(err, core.ErrFenced, "allocation under the old leader's fence")
				// The old allocator may still hold ids of its block: ones
				// reserved under a's leadership, which b never sees.
				noOverlap(e, rs)
			},
		},
		{
			Name:        "Concurrency/CASIncrements",
			Description: "concurrent read-then-compare-and-set increments from several clients, retried on ErrBadVersion, lose no update",
			run: func(e *env) {
				e.create(e.c0, p("ctr"), []byte("0"), core.Persistent)
				cs := e.clients(4)
				const per = 15
				errs := make([]error, len(cs))
				parallel(len(cs), func(i int) {
					for done := 0; done < per; {
						n, err := core.Get(e.ctx, cs[i], p("ctr"))
						if err != nil {
							errs[i] = err
							return
						}
						v, _ := strconv.Atoi(string(n.Data))
						_, err = core.Set(e.ctx, cs[i], p("ctr"), []byte(strconv.Itoa(v+1)), n.Stat.Version, core.Fence{})
						if errors.Is(err, core.ErrBadVersion) {
							continue
						}
						if err != nil {
							errs[i] = err
							return
						}
						done++
					}
				})
				for i, err := range errs {
					e.ok(err, "client %d", i)
				}
				n := e.data(e.c0, p("ctr"), []byte(strconv.Itoa(per*len(cs))))
				if n.Stat.Version != int64(per*len(cs)) {
					e.t.Fatalf("version %d, want %d", n.Stat.Version, per*len(cs))
				}
			},
		},
		{
			Name:        "Concurrency/Linearizable",
			Description: "concurrent get, set and compare-and-set on one node from several clients, between two sequential rounds (each client's set read at once by the next client), form a linearizable history (checked with porcupine)",
			run:         func(e *env) { linearizable(e, false) },
		},
		{
			Name:        "Concurrency/Linearizable/Faults",
			Description: "the same history stays linearizable under faults: calls cut short by deadlines, a session expired mid-run, and where the backend has them injected write failures and latencies (FaultInjection) and leadership transfers between members (LeadershipTransfer)",
			run:         func(e *env) { linearizable(e, true) },
		},
	}
}
