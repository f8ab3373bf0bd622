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

// ErrNotLinearizable is the error of CheckLinearizableUnderFaults when
// porcupine rejects the history.
var ErrNotLinearizable = errors.New("conformance: history not linearizable")

// Fault is one fault CheckLinearizableUnderFaults injects amid the calls.
type Fault struct {
	// Name names the fault in messages.
	Name string
	// Inject injects the fault and returns once it is over as far as the
	// caller knows (a killed process restarted, a partition healed); the
	// calls go on meanwhile. An error ends the check with it.
	Inject func(ctx context.Context) error
}

// FaultHistory configures CheckLinearizableUnderFaults: the register
// history of Concurrency/Linearizable, run against clients and under
// faults the caller provides (killed processes, partitions, restarted
// servers: faults the suite cannot cause through a harness).
type FaultHistory struct {
	// Clients run the calls, one goroutine each (at least 2). They are
	// used for the whole check: a client whose server is killed must
	// answer with errors meanwhile and work again once it is back.
	Clients []core.MetadataBackend
	// Path is the register node, created through Clients[0]; its parent
	// must exist. Default "/conformance-faults".
	Path string
	// Faults are injected one after the other, each once OpsBetween calls
	// have been answered since the previous one.
	Faults []Fault
	// OpsBetween is how many calls are answered before the first fault,
	// between faults and after the last (default 100).
	OpsBetween int
	// CallTimeout bounds each call (default 2 s).
	CallTimeout time.Duration
	// Wait bounds each wait for calls to be answered (default 30 s).
	Wait time.Duration
	// StaleReads is the check's negative control: reads are served from
	// a cache the clients share and refresh at most once a second (as a
	// follower that answers without asking the leader). The check must
	// then fail with ErrNotLinearizable, whatever the faults.
	StaleReads bool
	// Seed seeds the choice of calls; 0 picks one from the clock.
	Seed uint64
}

// FaultReport tells what a CheckLinearizableUnderFaults run recorded.
type FaultReport struct {
	// Ops is the number of operations in the history; Pending the writes
	// among them whose outcome is unknown (failed or cut off: they may
	// take effect at any time after their call, up to the end of the
	// history); FailedReads the reads left out (a failed read has no
	// effect).
	Ops, Pending, FailedReads int
	// Seed is the seed used.
	Seed uint64
}

// CheckLinearizableUnderFaults runs concurrent get, set and
// compare-and-set calls on one node from h.Clients while it injects
// h.Faults one after the other, between two sequential rounds (each
// client sets the node and the next one reads it at once, retried until
// answered), and checks the history with porcupine. A write that fails,
// for whatever reason, is recorded with an unknown outcome, never left
// out; a client whose call failed reads (without recording failed reads)
// until it is answered before it writes again, so that a dead server adds
// one unknown write per client, not thousands. It returns an error
// wrapping ErrNotLinearizable if the history is not linearizable, and
// another error if a fault failed, the calls made no progress within
// h.Wait or the check could not decide within 30 s.
func CheckLinearizableUnderFaults(ctx context.Context, h FaultHistory) (FaultReport, error) {
	if len(h.Clients) < 2 {
		return FaultReport{}, fmt.Errorf("%w: CheckLinearizableUnderFaults needs at least 2 clients, got %d", core.ErrInvalidArgument, len(h.Clients))
	}
	if h.Path == "" {
		h.Path = "/conformance-faults"
	}
	if h.OpsBetween <= 0 {
		h.OpsBetween = 100
	}
	if h.CallTimeout <= 0 {
		h.CallTimeout = 2 * time.Second
	}
	if h.Wait <= 0 {
		h.Wait = 30 * time.Second
	}
	if h.Seed == 0 {
		h.Seed = uint64(time.Now().UnixNano())
	}
	rep := FaultReport{Seed: h.Seed}
	cs := h.Clients
	if h.StaleReads {
		cache := newStaleCache()
		cs = make([]core.MetadataBackend, len(h.Clients))
		for i, c := range h.Clients {
			cs[i] = &staleReads{MetadataBackend: c, cache: cache}
		}
	}
	reg := &regHistory{path: h.Path, start: time.Now()}
	cctx, cancel := context.WithTimeout(ctx, h.Wait)
	_, _, err := core.Create(cctx, cs[0], h.Path, []byte("init"), core.CreateOptions{})
	cancel()
	if err != nil {
		return rep, fmt.Errorf("create the register %s: %w", h.Path, err)
	}
	lastVer := make([]int64, len(cs))
	var failedReads int
	var answered int
	var mu sync.Mutex
	count := func(err error, op string) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			answered++
		case op == "get":
			failedReads++
		}
	}
	// until calls c's op until it is answered, within h.Wait.
	until := func(id int, op, val string) error {
		deadline := time.Now().Add(h.Wait)
		for {
			cctx, cancel := context.WithTimeout(ctx, h.CallTimeout)
			err := reg.do(cctx, id, cs[id], op, val, &lastVer[id])
			cancel()
			count(err, op)
			if err == nil {
				return nil
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("client %d: %s not answered within %v: %w", id, op, h.Wait, err)
			}
			time.Sleep(20 * time.Millisecond) // back off from a server that is down
		}
	}
	sequential := func(round string) error {
		for k := range cs {
			if err := until(k, "set", fmt.Sprintf("%s-%d", round, k)); err != nil {
				return err
			}
			if err := until((k+1)%len(cs), "get", ""); err != nil {
				return err
			}
		}
		return nil
	}
	if err := sequential("before"); err != nil {
		return rep, err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(h.Seed, uint64(i)))
			failed := false
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				op := [...]string{"get", "set", "cas"}[rnd.IntN(3)]
				if failed {
					op = "get"
				}
				cctx, cancel := context.WithTimeout(ctx, h.CallTimeout)
				err := reg.do(cctx, i, cs[i], op, fmt.Sprintf("c%d-%d", i, j), &lastVer[i])
				cancel()
				count(err, op)
				failed = err != nil
				if failed {
					time.Sleep(20 * time.Millisecond) // back off from a server that is down
				}
			}
		}()
	}
	progress := func(what string) error {
		mu.Lock()
		from := answered
		mu.Unlock()
		deadline := time.Now().Add(h.Wait)
		for {
			mu.Lock()
			n := answered - from
			mu.Unlock()
			if n >= h.OpsBetween {
				return nil
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("only %d calls answered within %v %s", n, h.Wait, what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	err = progress("before the first fault")
	for _, f := range h.Faults {
		if err != nil {
			break
		}
		if err = f.Inject(ctx); err != nil {
			err = fmt.Errorf("fault %s: %w", f.Name, err)
			break
		}
		err = progress("after fault " + f.Name)
	}
	close(stop)
	wg.Wait()
	if err != nil {
		return rep, err
	}
	if err := sequential("after"); err != nil {
		return rep, err
	}
	rep.Ops, rep.FailedReads = len(reg.ops), failedReads
	for _, op := range reg.ops {
		if op.Output.(regOutput).unknown {
			rep.Pending++
		}
	}
	switch porcupine.CheckOperationsTimeout(registerModel.ToModel(), reg.ops, 30*time.Second) {
	case porcupine.Illegal:
		return rep, fmt.Errorf("%w: %d operations (%d writes of unknown outcome), seed %d", ErrNotLinearizable, rep.Ops, rep.Pending, rep.Seed)
	case porcupine.Unknown:
		return rep, fmt.Errorf("the linearizability check of %d operations (%d writes of unknown outcome) did not decide within 30 s", rep.Ops, rep.Pending)
	}
	return rep, nil
}

// RunLinearizableUnderFaults runs CheckLinearizableUnderFaults with h,
// then, on a second register (h.Path + "-stale"), its negative control
// (h with StaleReads), and fails t unless the first history is
// linearizable and the second is found not to be. It logs both reports.
func RunLinearizableUnderFaults(t T, h FaultHistory) {
	t.Helper()
	if h.Path == "" {
		h.Path = "/conformance-faults"
	}
	rep, err := CheckLinearizableUnderFaults(context.Background(), h)
	if err != nil {
		t.Fatalf("%v (%+v)", err, rep)
	}
	t.Logf("linearizable under faults: %+v", rep)
	h.Path, h.StaleReads, h.Seed = h.Path+"-stale", true, 0
	rep, err = CheckLinearizableUnderFaults(context.Background(), h)
	if !errors.Is(err, ErrNotLinearizable) {
		t.Fatalf("negative control with stale reads: got %v (%+v), want ErrNotLinearizable", err, rep)
	}
	t.Logf("negative control: %v", err)
}

// staleCache is a read cache shared by clients: a path's result is served
// for up to a second after it was read. It makes reads deliberately stale,
// for the negative controls of the linearizability checks.
type staleCache struct {
	mu      sync.Mutex
	results map[string]core.GetResult
	read    map[string]time.Time
}

func newStaleCache() *staleCache {
	return &staleCache{results: map[string]core.GetResult{}, read: map[string]time.Time{}}
}

func (s *staleCache) get(ctx context.Context, b core.MetadataBackend, path string, opts core.ReadOptions) (core.GetResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.results[path]; ok && time.Since(s.read[path]) < time.Second {
		return r, nil
	}
	rs, err := b.GetMany(ctx, []string{path}, opts)
	if err != nil {
		return core.GetResult{}, err
	}
	s.results[path], s.read[path] = rs[0], time.Now()
	return rs[0], nil
}

// staleReads is a client whose reads go through a staleCache.
type staleReads struct {
	core.MetadataBackend
	cache *staleCache
}

func (s *staleReads) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	rs := make([]core.GetResult, len(paths))
	for i, path := range paths {
		r, err := s.cache.get(ctx, s.MetadataBackend, path, opts)
		if err != nil {
			return nil, err
		}
		rs[i] = r
	}
	return rs, nil
}

func (s *staleReads) Unwrap() core.MetadataBackend { return s.MetadataBackend }
