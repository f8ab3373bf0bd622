package bench

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
)

// tracer records which backend served each read, to check the
// interleaving.
type tracer struct {
	mu  sync.Mutex
	log []string
}

func (t *tracer) add(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.log); n == 0 || t.log[n-1] != name {
		t.log = append(t.log, name)
	}
}

type tracedClient struct {
	core.MetadataBackend
	name string
	t    *tracer
}

func (c *tracedClient) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	c.t.add(c.name)
	return c.MetadataBackend.GetMany(ctx, paths, opts)
}

// fakeStarter is an in-process system over the memory backend, without a
// coordinator or an election.
func fakeStarter(name string, tr *tracer) func(ctx context.Context, env *runEnv) (*System, error) {
	return func(ctx context.Context, env *runEnv) (*System, error) {
		st := memory.NewStore(memory.StoreOptions{})
		s := &System{
			Name: name,
			NewClient: func(ctx context.Context, n string) (core.MetadataBackend, error) {
				return &tracedClient{MetadataBackend: st.NewClient(core.ClientOptions{Name: n}), name: name, t: tr}, nil
			},
			Missing: map[string]string{"election": "fake has no election"},
		}
		s.onClose(func() error { st.Close(); return nil })
		return s, nil
	}
}

func TestRunInterleavesAndReportsUnavailable(t *testing.T) {
	tr := &tracer{}
	starters["fake-a"] = fakeStarter("fake-a", tr)
	starters["fake-b"] = fakeStarter("fake-b", tr)
	t.Cleanup(func() { delete(starters, "fake-a"); delete(starters, "fake-b") })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{
		Backends: []string{"fake-a", "fake-b"},
		Quick:    true,
		Rows:     []string{"store.get", "admin.get-table-info", "election"},
		WorkDir:  t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 4 { // the election prefix selects the 3- and 5-member rows
		t.Fatalf("got %d rows, want 4", len(rep.Rows))
	}
	// Warm-up A, B, then three rounds of one measured row alternating
	// the order, A B | B A | A B: the reads switch backends six times.
	// (Without the alternation it would be eight.)
	if got, want := strings.Join(tr.log, ","), "fake-a,fake-b,fake-a,fake-b,fake-a,fake-b"; got != want {
		t.Errorf("backends served reads in the order %s, want %s (interleaved, alternating)", got, want)
	}
	for _, row := range rep.Rows {
		if len(row.Results) != 2 {
			t.Fatalf("row %s: %d results, want 2", row.ID, len(row.Results))
		}
		for _, res := range row.Results {
			switch row.ID {
			case "store.get":
				if !res.Available() || res.N == 0 || res.Errors != 0 {
					t.Errorf("store.get on %s: %+v, want measured without errors", res.Backend, res)
				}
			case "admin.get-table-info":
				if res.Available() || !strings.Contains(res.Unavailable, "coordinator") {
					t.Errorf("admin row on %s: %+v, want not available naming the coordinator", res.Backend, res)
				}
			case "election.sigkill", "election.sigkill-5":
				if res.Unavailable != "fake has no election" {
					t.Errorf("election on %s: unavailable %q, want the system's reason", res.Backend, res.Unavailable)
				}
			}
		}
	}
	// Two backends: every batch first waited for the other to go quiet
	// (at once here: the fakes have no processes).
	if rep.Settle == nil || rep.Settle.Batches == 0 || rep.Settle.Unsettled != 0 {
		t.Errorf("settling: %+v, want every batch counted and none unsettled", rep.Settle)
	}
	if rep.Machine.Cores < 1 || rep.Options.Rounds != 3 {
		t.Errorf("report header: machine %+v, options %+v", rep.Machine, rep.Options)
	}
	// The floors are measured in the same run: fsync in the work directory
	// and a loopback round trip always can be; the plugin hop needs the
	// memory plugin binary, and says why when it is missing.
	floors := map[string]Floor{}
	for _, f := range rep.Floors {
		floors[f.ID] = f
	}
	for _, id := range []string{FloorFsync, FloorLoopback} {
		if f := floors[id]; f.Unavailable != "" || f.N == 0 || f.P50Micros <= 0 || f.P99Micros < f.P50Micros {
			t.Errorf("floor %s: %+v, want measured", id, f)
		}
	}
	if f, ok := floors[FloorPluginHop]; !ok || (f.N == 0) == (f.Unavailable == "") {
		t.Errorf("floor %s: %+v, want measured or a reason", FloorPluginHop, f)
	}
}

// TestApplyFloors: a latency row gets the sum of the floors that apply to
// it (a replication round trip more with three voters) and each result
// its multiple of it; a row whose floor was not measured, or that has
// none, gets nothing.
func TestApplyFloors(t *testing.T) {
	rep := &Report{
		Options: RunConfig{Voters: 3},
		Floors: []Floor{
			{ID: FloorFsync, N: 10, P50Micros: 100},
			{ID: FloorPluginHop, N: 10, P50Micros: 150},
			{ID: FloorLoopback, N: 10, P50Micros: 50},
		},
		Rows: []Row{
			{ID: "store.write-serial", Metric: MetricP50, Results: []Result{{Backend: Raft, N: 5, P50Micros: 900}, {Backend: ZooKeeper, Unavailable: "down"}}},
			{ID: "store.get", Metric: MetricP50, Results: []Result{{Backend: Raft, N: 5, P50Micros: 300}}},
			{ID: "image.get-table", Metric: MetricP50, Results: []Result{{Backend: Raft, N: 5, P50Micros: 1}}},
			{ID: "store.write-64", Metric: MetricThroughput, Results: []Result{{Backend: Raft, N: 5, OpsPerSec: 9000}}},
		},
	}
	applyFloors(rep)
	w := rep.Rows[0]
	if w.Floor == nil || w.Floor.P50Micros != 300 || strings.Join(w.Floor.Floors, "+") != "fsync+plugin-hop+loopback-grpc" {
		t.Fatalf("serial write floor %+v, want fsync+hop+round trip = 300µs", w.Floor)
	}
	if w.Results[0].FloorRatio != 3 || w.Results[1].FloorRatio != 0 {
		t.Errorf("ratios %v and %v, want 3 and none for the unavailable result", w.Results[0].FloorRatio, w.Results[1].FloorRatio)
	}
	if g := rep.Rows[1]; g.Floor == nil || g.Results[0].FloorRatio != 2 {
		t.Errorf("store.get: floor %+v ratio %v, want the plugin hop and 2x", g.Floor, g.Results[0].FloorRatio)
	}
	for _, r := range rep.Rows[2:] {
		if r.Floor != nil || r.Results[0].FloorRatio != 0 {
			t.Errorf("row %s got a floor %+v", r.ID, r.Floor)
		}
	}
	// With one voter there is no replication round trip.
	rep.Options.Voters = 1
	rep.Floors = rep.Floors[:2]
	applyFloors(rep)
	if f := rep.Rows[0].Floor; f == nil || f.P50Micros != 250 {
		t.Errorf("one voter: floor %+v, want fsync+hop = 250µs", f)
	}
	// A floor that was not measured leaves the row without one.
	rep.Floors[0].Unavailable, rep.Rows[0].Floor = "no disk", nil
	applyFloors(rep)
	if rep.Rows[0].Floor != nil {
		t.Errorf("floor from an unmeasured fsync: %+v", rep.Rows[0].Floor)
	}
	var b strings.Builder
	rep.Rows[1].Results[0].FloorRatio = 2
	if err := rep.WriteMarkdown(&b); err != nil || !strings.Contains(b.String(), "plugin-hop 150µs: raft 2.0x") || !strings.Contains(b.String(), "| machine floor |") {
		t.Errorf("markdown lacks the floors:\n%s", b.String())
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	ctx := context.Background()
	if _, err := Run(ctx, Options{Backends: []string{"raft"}, Voters: 2}); err == nil || !strings.Contains(err.Error(), "voters: 2") {
		t.Errorf("Voters 2: %v, want an error naming voters", err)
	}
	if _, err := Run(ctx, Options{Backends: []string{"etcd"}}); err == nil || !strings.Contains(err.Error(), `unknown backend "etcd"`) {
		t.Errorf("unknown backend: %v, want an error naming it", err)
	}
	if _, err := Run(ctx, Options{}); err == nil {
		t.Error("no backends: nil error, want one")
	}
}

func TestWriteMarkdown(t *testing.T) {
	var b strings.Builder
	if err := sampleReport().WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| row | zookeeper p50 | zookeeper p99 | zookeeper ops/s | raft p50 |",
		"| createTable (admin API) | 20.00ms | 30.00ms |",
		"| catalog read from the image | n/a | | |",
		"| raft: plugin | 50.0 MiB |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, out)
		}
	}
}

// fakeRigs counts the election rigs a fake system started and how many
// are open.
type fakeRigs struct {
	mu            sync.Mutex
	started, open int
	// openDuringReads counts store.get calls made while a rig was open.
	openDuringReads int
}

type fakeRig struct {
	r      *fakeRigs
	closed bool
}

func (g *fakeRig) KillLeaderAndWait(context.Context) (ElectionKill, error) {
	return ElectionKill{CampaignMicros: 100, ServingMicros: 200, TotalMicros: 300, EpochStep: 1}, nil
}

func (g *fakeRig) Close() error {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	if !g.closed {
		g.closed = true
		g.r.open--
	}
	return nil
}

type rigCheckingClient struct {
	core.MetadataBackend
	r *fakeRigs
}

func (c *rigCheckingClient) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	c.r.mu.Lock()
	if c.r.open > 0 {
		c.r.openDuringReads++
	}
	c.r.mu.Unlock()
	return c.MetadataBackend.GetMany(ctx, paths, opts)
}

// TestElectionMembersLiveForTheirBatch: an election row's members are
// started for each of its batches and stopped after it, so the other
// rows' batches run with none of them.
func TestElectionMembersLiveForTheirBatch(t *testing.T) {
	rigs := &fakeRigs{}
	starters["fake-e"] = func(ctx context.Context, env *runEnv) (*System, error) {
		st := memory.NewStore(memory.StoreOptions{})
		s := &System{
			Name: "fake-e",
			NewClient: func(ctx context.Context, n string) (core.MetadataBackend, error) {
				return &rigCheckingClient{MetadataBackend: st.NewClient(core.ClientOptions{Name: n}), r: rigs}, nil
			},
			Election: func(ctx context.Context, n int) (ElectionRig, error) {
				rigs.mu.Lock()
				defer rigs.mu.Unlock()
				rigs.started++
				rigs.open++
				return &fakeRig{r: rigs}, nil
			},
		}
		s.onClose(func() error { st.Close(); return nil })
		return s, nil
	}
	t.Cleanup(func() { delete(starters, "fake-e") })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Backends: []string{"fake-e"}, Quick: true, Rows: []string{"store.get", "election.sigkill"}, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	rigs.mu.Lock()
	defer rigs.mu.Unlock()
	// The prefix selects both election rows: for each, one rig in
	// prepare and one per round, none left open.
	if want := 2 * (1 + rep.Options.Rounds); rigs.started != want || rigs.open != 0 {
		t.Errorf("election rigs: %d started, %d open at the end; want %d (prepare and one per round, two rows), none open", rigs.started, rigs.open, want)
	}
	if rigs.openDuringReads != 0 {
		t.Errorf("%d store.get calls ran while an election rig was open, want none", rigs.openDuringReads)
	}
	for _, row := range rep.Rows {
		if strings.HasPrefix(row.ID, "election.sigkill") && (len(row.Results) != 1 || !row.Results[0].Available() || row.Results[0].Errors != 0) {
			t.Errorf("election row: %+v, want measured without errors", row.Results)
		}
	}
}
