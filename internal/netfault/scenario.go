package netfault

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminclient"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// Fault is a named nemesis action against a cluster whose coordinator
// leader is leader (an index into the coordinators, which run on the
// net's nodes of the same index).
type Fault struct {
	Name string
	// Inject starts the fault; Heal (nt.Heal) ends it. A fault that flaps
	// runs until ctx ends.
	Inject func(ctx context.Context, nt *Net, leader int, others []int) error
	// Steady: the leader stays healthy with a majority, so the fault must
	// not move the leadership (the disruption budget).
	Steady bool
	// Fences: the fault cuts the leader off and another takes over; the
	// scenario checks that the old one writes nothing once its epoch is
	// stale (FIP-9 fencing; see fencing).
	Fences bool
}

// Faults is every fault of the set, for a cluster of three coordinators on
// nodes 0..2.
func Faults() []Fault {
	one := func(from, to func(l int, o []int) int, mode Mode) func(context.Context, *Net, int, []int) error {
		return func(_ context.Context, nt *Net, l int, o []int) error {
			return nt.Cut([]int{from(l, o)}, []int{to(l, o)}, mode)
		}
	}
	leader := func(l int, _ []int) int { return l }
	follower := func(_ int, o []int) int { return o[0] }
	both := func(mode Mode) func(context.Context, *Net, int, []int) error {
		return func(_ context.Context, nt *Net, l int, o []int) error {
			return nt.Partition([]int{l}, []int{o[0]}, mode)
		}
	}
	isolate := func(mode Mode) func(context.Context, *Net, int, []int) error {
		return func(_ context.Context, nt *Net, l int, o []int) error { return nt.Partition([]int{l}, o, mode) }
	}
	return []Fault{
		{Name: "isolate-leader-drop", Inject: isolate(Drop)},
		{Name: "isolate-leader-refuse", Inject: isolate(Refuse)},
		{Name: "follower-to-leader-drop", Inject: one(follower, leader, Drop), Steady: true},
		{Name: "leader-to-follower-drop", Inject: one(leader, follower, Drop), Steady: true},
		{Name: "leader-follower-drop-both", Inject: both(Drop), Steady: true},
		{Name: "follower-to-leader-refuse", Inject: one(follower, leader, Refuse), Steady: true},
		{Name: "leader-to-follower-refuse", Inject: one(leader, follower, Refuse), Steady: true},
		{Name: "leader-follower-refuse-both", Inject: both(Refuse), Steady: true},
		{Name: "bridge-leader-in-middle", Steady: true, Inject: func(_ context.Context, nt *Net, l int, o []int) error {
			return nt.Bridge([]int{o[0]}, []int{o[1]}, Drop)
		}},
		{Name: "bridge-follower-in-middle", Steady: true, Inject: func(_ context.Context, nt *Net, l int, o []int) error {
			return nt.Bridge([]int{l}, []int{o[1]}, Refuse)
		}},
		{Name: "flap-isolate-leader", Inject: func(ctx context.Context, nt *Net, l int, o []int) error {
			rng := rand.New(rand.NewPCG(uint64(l), 7))
			for on := true; ctx.Err() == nil; on = !on {
				var err error
				if on {
					err = nt.Partition([]int{l}, o, Mode(1+rng.IntN(2)))
				} else {
					err = nt.Heal()
				}
				if err != nil {
					return err
				}
				t := time.NewTimer(time.Duration(200+rng.IntN(600)) * time.Millisecond)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
			}
			return nil
		}},
	}
}

// FaultByName finds a fault of Faults.
func FaultByName(name string) Fault {
	for _, f := range Faults() {
		if f.Name == name {
			return f
		}
	}
	panic("netfault: no fault " + name)
}

// Result is one scenario's outcome.
type Result struct {
	Fault         string
	LeaderChanges int // epochs observed above the one before the fault
	Report        Report
	Control       Report // the negative control's check
	// Fenced is how many writes sent to the old leader once its epoch was
	// stale it refused (Fault.Fences), FenceViolations what broke.
	Fenced          int
	FenceViolations []string
}

func (r Result) String() string {
	f := ""
	if r.Fenced > 0 || len(r.FenceViolations) > 0 {
		f = fmt.Sprintf("; fencing: %d writes to the stale leader refused, %d violations %v", r.Fenced, len(r.FenceViolations), r.FenceViolations)
	}
	return fmt.Sprintf("%s: %d leader changes; %s; negative control linearizable=%v%s", r.Fault, r.LeaderChanges, r.Report, r.Control.Linearizable, f)
}

// Scenario is one run of the checked history under one fault.
type Scenario struct {
	Net    *Net
	Coords []*Coordinator
	Fault  Fault
	Seed   uint64
	// Warm, Hold and After: the history runs Warm before the fault, the
	// fault holds for Hold, and the history goes on After past the heal.
	Warm, Hold, After time.Duration
	Clients           int
	// NoBuckets leaves out the bucket part of the workload (two tablet
	// servers and AdjustIsr calls, isr.go).
	NoBuckets bool
}

// Run runs the scenario and checks its history; it fails t on a broken
// property (never on a leader change: the caller decides what a fault
// may cost).
func (s Scenario) Run(t testing.TB) Result {
	t.Helper()
	if s.Clients == 0 {
		s.Clients = 3
	}
	addrs := Addrs(s.Coords)
	admin, err := adminclient.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	WaitLeader(t, admin, s.Coords, 90*time.Second)
	// The workload's database holds its tables; it is never dropped.
	err = admin.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: Database, IgnoreIfExists: true})
		return err
	})
	if err != nil {
		t.Fatalf("create database %s: %v", Database, err)
	}
	if !s.NoBuckets {
		s.Net.StartTabletServers([]int32{1, 2}, s.Coords[0].tablet...)
		sctx, sc := context.WithTimeout(ctx, 60*time.Second)
		err := SetUpIsr(sctx, admin, 2)
		sc()
		if err != nil {
			t.Fatalf("%s: %v", s.Fault.Name, err)
		}
	}
	h := NewHistory()
	keys := Keys(4, 2)
	var clients []*Client
	for i := 0; i < s.Clients; i++ {
		cl, err := adminclient.NewClient(addrs)
		if err != nil {
			t.Fatal(err)
		}
		cl.RetryWait = 50 * time.Millisecond
		cl.ConnectWait = 500 * time.Millisecond
		defer cl.Close()
		clients = append(clients, &Client{ID: i, C: cl, H: h, CallTimeout: 2 * time.Second, Buckets: !s.NoBuckets})
	}
	wctx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Run(wctx, keys, rand.New(rand.NewPCG(s.Seed, uint64(i))))
		}()
	}
	sleepCtx(ctx, s.Warm)
	leader, epoch, err := Leader(ctx, admin, s.Coords)
	if err != nil {
		stopWork()
		wg.Wait()
		t.Fatalf("%s: no leader before the fault: %v", s.Fault.Name, err)
	}
	var others []int
	for i := range s.Coords {
		if i != leader {
			others = append(others, i)
		}
	}
	// The monitor records every epoch a coordinator leads at.
	var mu sync.Mutex
	epochs := map[int64]bool{}
	mctx, stopMon := context.WithCancel(ctx)
	var mwg sync.WaitGroup
	mwg.Add(1)
	go func() {
		defer mwg.Done()
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for mctx.Err() == nil {
			for _, v := range Views(mctx, admin, s.Coords, 500*time.Millisecond) {
				if v.Err == nil && v.IsLeader && v.Epoch > epoch {
					mu.Lock()
					epochs[v.Epoch] = true
					mu.Unlock()
				}
			}
			select {
			case <-mctx.Done():
			case <-tk.C:
			}
		}
	}()
	fctx, stopFault := context.WithTimeout(ctx, s.Hold)
	// The fencing check runs from the fault to the end of the workload,
	// the heal included (the old leader hears of its stale epoch then).
	var fen *fence
	var fenErr error
	fenCtx, stopFence := context.WithCancel(ctx)
	fenDone := make(chan struct{})
	ferr := s.Fault.Inject(fctx, s.Net, leader, others)
	if s.Fault.Fences {
		go func() {
			defer close(fenDone)
			fen, fenErr = fencing(fenCtx, admin, s.Coords, leader, epoch, fmt.Sprint(s.Seed%1000000))
		}()
	} else {
		close(fenDone)
	}
	<-fctx.Done()
	stopFault()
	if herr := s.Net.Heal(); herr != nil {
		ferr = errors.Join(ferr, herr)
	}
	sleepCtx(ctx, s.After)
	stopFence()
	<-fenDone
	stopWork()
	wg.Wait()
	// After healing: a leader again, the final reads, the negative control.
	WaitLeader(t, admin, s.Coords, 60*time.Second)
	// A last look at who leads after the heal.
	sleepCtx(ctx, 300*time.Millisecond)
	stopMon()
	mwg.Wait()
	if ferr != nil {
		t.Fatalf("%s: the nemesis failed: %v", s.Fault.Name, ferr)
	}
	rctx, rc := context.WithTimeout(ctx, 60*time.Second)
	defer rc()
	if err := clients[0].ReadAll(rctx, keys); err != nil {
		t.Fatalf("%s: %v", s.Fault.Name, err)
	}
	res := Result{Fault: s.Fault.Name}
	mu.Lock()
	res.LeaderChanges = len(epochs)
	mu.Unlock()
	res.Report = h.Check(60 * time.Second)
	stale, err := h.StaleControl(rctx, clients[0])
	if err != nil {
		t.Fatalf("%s: %v", s.Fault.Name, err)
	}
	res.Control = stale.Check(60 * time.Second)
	if fenErr != nil {
		res.FenceViolations = append(res.FenceViolations, fenErr.Error())
	}
	if fen != nil {
		res.Fenced = len(fen.refused)
		res.FenceViolations = append(res.FenceViolations, fen.check(rctx, admin)...)
	}
	t.Logf("%s (seed %d): %s", s.Fault.Name, s.Seed, res)
	if !res.Report.Linearizable {
		t.Errorf("%s: the history is not linearizable (undecided: %v)", s.Fault.Name, res.Report.Undecided)
		for _, b := range res.Report.Bad {
			t.Logf("%s: %s", s.Fault.Name, b)
		}
	}
	for _, l := range res.Report.Lost {
		t.Errorf("%s: acknowledged write lost: %s", s.Fault.Name, l)
	}
	for _, o := range res.Report.Overlaps {
		t.Errorf("%s: handed out twice: %s", s.Fault.Name, o)
	}
	for _, v := range res.FenceViolations {
		t.Errorf("%s: %s", s.Fault.Name, v)
	}
	if res.Control.Linearizable {
		t.Errorf("%s: the negative control (reads from a stale cache) passed the checker: the checker cannot see stale reads", s.Fault.Name)
	}
	if s.Fault.Steady && res.LeaderChanges > 0 {
		t.Errorf("%s: the leader was healthy with a majority, yet the leadership moved %d times", s.Fault.Name, res.LeaderChanges)
	}
	return res
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Summary formats results as table rows for the docs.
func Summary(rs []Result) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %d | %v | %d | %d |\n", r.Fault, r.LeaderChanges, r.Report.LongestNoWrite.Round(10*time.Millisecond), r.Report.Ops, r.Report.Violations()+len(r.FenceViolations))
	}
	return b.String()
}
