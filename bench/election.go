package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// Default numbers of leader kills per election row and backend
// (Options.Elections).
const (
	DefaultElections      = 50
	DefaultQuickElections = 3
	// MaxElections bounds Options.Elections (a kill costs a few seconds
	// with the restart of the killed member).
	MaxElections = 1000
)

// How often the election rig looks at the survivors' coordinators' role
// (an atomic read): the "serving" phase's resolution, not the total's,
// which ends when the admin API answers.
const (
	electionRolePoll = 2 * time.Millisecond
)

// ElectionKill is one measured kill of the leader, every phase counted
// from the SIGKILL, in microseconds. A phase that does not apply (the Raft
// leader on ZooKeeper) or was not seen is 0.
type ElectionKill struct {
	// CampaignMicros: a surviving coordinator's Campaign returned (on
	// Raft: its leader record is committed and applied; on ZooKeeper: the
	// dead session expired, the next candidate bumped the epoch).
	CampaignMicros float64 `json:"campaign_us,omitempty"`
	// ServingMicros: that coordinator loaded its metadata image and
	// serves as leader.
	ServingMicros float64 `json:"serving_us,omitempty"`
	// TotalMicros: its admin API answered a leader-only call
	// (ListDatabases); the row's sample.
	TotalMicros float64 `json:"total_us"`
	// EpochStep is the new leader's epoch minus the killed one's: on Raft
	// the number of terms the election took (1: one vote round; more:
	// split votes or disrupted rounds).
	EpochStep int64 `json:"epoch_step"`
	// Killed and Winner name the killed and the new leader's member.
	Killed string `json:"killed"`
	Winner string `json:"winner"`
	// TreeSnapshots and NodesRead are what the new leader's backend
	// client read of the tree from the kill to the measured answer:
	// snapshots taken (whole or streamed) and nodes read (in snapshots, by
	// path, one per listing). A warm standby takes no snapshot.
	TreeSnapshots int64 `json:"tree_snapshots"`
	NodesRead     int64 `json:"nodes_read"`
	// ImageNodes is the nodes in the new leader's image once it answered:
	// the tree it serves, though it read none of it after the kill.
	ImageNodes int `json:"image_nodes"`
}

// ElectionPhase summarizes one phase over the kills.
type ElectionPhase struct {
	Phase     string  `json:"phase"`
	N         int     `json:"n"`
	P50Micros float64 `json:"p50_us"`
	P90Micros float64 `json:"p90_us"`
	P99Micros float64 `json:"p99_us"`
	MaxMicros float64 `json:"max_us"`
}

// ElectionDetail is what the election rows report beyond the totals: the
// phases' distribution and every kill.
type ElectionDetail struct {
	Voters int             `json:"voters"`
	Phases []ElectionPhase `json:"phases"`
	// EpochSteps counts the kills by EpochStep ("1": 48, "2": 2).
	EpochSteps map[string]int `json:"epoch_steps,omitempty"`
	Kills      []ElectionKill `json:"kills"`
}

// summarizeElections builds the detail of kills.
func summarizeElections(voters int, kills []ElectionKill) *ElectionDetail {
	d := &ElectionDetail{Voters: voters, Kills: kills, EpochSteps: map[string]int{}}
	phase := func(name string, get func(ElectionKill) float64) {
		var ds []time.Duration
		for _, k := range kills {
			if v := get(k); v > 0 {
				ds = append(ds, time.Duration(v*1e3))
			}
		}
		if len(ds) == 0 {
			return
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		d.Phases = append(d.Phases, ElectionPhase{Phase: name, N: len(ds),
			P50Micros: micros(Percentile(ds, 50)), P90Micros: micros(Percentile(ds, 90)),
			P99Micros: micros(Percentile(ds, 99)), MaxMicros: micros(ds[len(ds)-1])})
	}
	phase("campaign returned", func(k ElectionKill) float64 { return k.CampaignMicros })
	phase("serving (image loaded)", func(k ElectionKill) float64 { return k.ServingMicros })
	phase("admin API answers", func(k ElectionKill) float64 { return k.TotalMicros })
	for _, k := range kills {
		d.EpochSteps[fmt.Sprint(k.EpochStep)]++
	}
	return d
}

// campaignTap passes every call to the wrapped backend and records when
// Campaign returned a leadership (the rig's "campaign returned" phase),
// what the coordinator read of the tree through it, and when its image's
// snapshot (the first of the client; without exact history, its watch's
// first Reset) was read whole.
type campaignTap struct {
	core.MetadataBackend
	started func()
	won     func(epoch int64)
	reads   *treeReads
	loaded  func()
}

// treeReads counts a coordinator's reads of the tree through its backend
// clients.
type treeReads struct {
	snapshots, nodes atomic.Int64
}

func (t campaignTap) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	t.reads.snapshots.Add(1)
	s, err := t.MetadataBackend.Snapshot(ctx, prefix)
	t.reads.nodes.Add(int64(len(s.Nodes)))
	if err == nil {
		t.loaded()
	}
	return s, err
}

// StreamSnapshot is the wrapped backend's (core.StreamSnapshot: streamed
// where it streams), counted; core.Optional finds it only where the
// wrapped backend declares streamed snapshots.
func (t campaignTap) StreamSnapshot(ctx context.Context, prefix string, pageBytes int, fn func(int64, []core.Node) error) error {
	t.reads.snapshots.Add(1)
	err := core.StreamSnapshot(ctx, t.MetadataBackend, prefix, pageBytes, func(rev int64, nodes []core.Node) error {
		t.reads.nodes.Add(int64(len(nodes)))
		return fn(rev, nodes)
	})
	if err == nil {
		t.loaded()
	}
	return err
}

// Watch is the wrapped backend's. A watch from a revision on a backend
// without exact history is counted as a tree read (its first response, a
// Reset, is the tree: the image loads from it), its Reset's events as the
// nodes read, and the image as loaded at the Reset's last page.
func (t campaignTap) Watch(ctx context.Context, prefix string, from int64) (<-chan core.WatchResponse, error) {
	ch, err := t.MetadataBackend.Watch(ctx, prefix, from)
	if err != nil || from == 0 || t.Capabilities().ExactHistory {
		return ch, err
	}
	t.reads.snapshots.Add(1)
	out := make(chan core.WatchResponse)
	go func() {
		defer close(out)
		first := true
		for r := range ch {
			if first && r.Reset {
				t.reads.nodes.Add(int64(len(r.Events)))
				if !r.Partial {
					first = false
					t.loaded()
				}
			}
			select {
			case out <- r:
			case <-ctx.Done():
				for range ch {
				}
				return
			}
		}
	}()
	return out, nil
}

func (t campaignTap) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	t.reads.nodes.Add(int64(len(paths)))
	return t.MetadataBackend.GetMany(ctx, paths, opts)
}

func (t campaignTap) Children(ctx context.Context, path string, opts core.ReadOptions) ([]string, core.Stat, error) {
	t.reads.nodes.Add(1)
	return t.MetadataBackend.Children(ctx, path, opts)
}

func (t campaignTap) Campaign(ctx context.Context, c core.Candidate) (core.Leadership, error) {
	t.started()
	l, err := t.MetadataBackend.Campaign(ctx, c)
	if err == nil {
		t.won(l.Epoch())
	}
	return l, err
}

// Unwrap implements core.Unwrapper.
func (t campaignTap) Unwrap() core.MetadataBackend { return t.MetadataBackend }

// electionCandidate is one coordinator on one member (plugin process).
type electionCandidate struct {
	m      *member
	srv    *coordinator.Server
	admin  *adminclient.Client
	cancel context.CancelFunc
	served chan error

	mu      sync.Mutex
	wonAt   time.Time
	wonEpch int64
	// opens counts the backend clients its coordinator opened;
	// campaigning is the number of the last one it campaigned with;
	// loaded the number of the last one whose first snapshot was read
	// whole (its image loaded).
	opens, campaigning, loaded int
	reads                      treeReads
	probe                      core.MetadataBackend // Raft: Status of the member
}

func (c *electionCandidate) counts() (opens, campaigning int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opens, c.campaigning
}

func (c *electionCandidate) won() (time.Time, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wonAt, c.wonEpch
}

// electionRig is n coordinators, each on its own member (plugin process),
// all campaigning in one store: the leader coordinator's member is
// SIGKILLed and the others' election is timed up to the moment the new
// leader's admin API answers.
type electionRig struct {
	backend string
	cands   []*electionCandidate
	copts   core.ClientOptions
	// restoreErr is why the last killed member could not be restored.
	restoreErr error
	restoreIdx int
	// ack is the call whose answer from the new leader ends a kill's
	// measurement; nil: a leader-only read (ListDatabases).
	ack func(ctx context.Context, a adminv1.AdminServiceClient) error
}

// newElectionRig starts a coordinator on each member (started: the
// members run already) and waits, at most leadBound, until one leads
// (errScaleBound after).
func newElectionRig(ctx context.Context, env *runEnv, backend string, ms []*member, copts core.ClientOptions, started bool, leadBound time.Duration) (*electionRig, error) {
	r := &electionRig{backend: backend, copts: copts}
	if !started {
		if err := startMembers(ctx, ms); err != nil {
			for _, m := range ms {
				m.close()
			}
			return nil, err
		}
	}
	for i, m := range ms {
		c, err := r.startCandidate(env, i, m)
		if err != nil {
			r.Close()
			for _, m := range ms[i:] {
				m.close()
			}
			return nil, err
		}
		r.cands = append(r.cands, c)
	}
	deadline := time.Now().Add(leadBound)
	for r.leader() < 0 {
		if time.Now().After(deadline) {
			r.Close()
			return nil, fmt.Errorf("no coordinator led within %v: %w", leadBound, errScaleBound)
		}
		select {
		case <-ctx.Done():
			r.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return r, nil
}

func (r *electionRig) startCandidate(env *runEnv, i int, m *member) (*electionCandidate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &electionCandidate{m: m, served: make(chan error, 1)}
	srv, err := coordinator.New(coordinator.Options{
		Open: func(ctx context.Context) (core.MetadataBackend, error) {
			b, err := m.client(ctx, r.copts)
			if err != nil {
				return nil, err
			}
			c.mu.Lock()
			c.opens++
			gen := c.opens
			c.mu.Unlock()
			return campaignTap{MetadataBackend: b, started: func() {
				c.mu.Lock()
				c.campaigning = gen
				c.mu.Unlock()
			}, won: func(epoch int64) {
				c.mu.Lock()
				c.wonAt, c.wonEpch = time.Now(), epoch
				c.mu.Unlock()
			}, reads: &c.reads, loaded: func() {
				c.mu.Lock()
				c.loaded = max(c.loaded, gen)
				c.mu.Unlock()
			}}, nil
		},
		Listener: ln,
		ID:       fmt.Sprintf("bench-election-%d", i+1),
		Logger:   env.logger().With(slog.String("candidate", m.label)),
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	c.srv = srv
	if c.admin, err = adminclient.NewClient([]string{ln.Addr().String()}); err != nil {
		ln.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() { c.served <- srv.Serve(ctx) }()
	return c, nil
}

// leader is the index of the candidate that serves as leader, or -1.
func (r *electionRig) leader() int {
	for i, c := range r.cands {
		if c.srv.IsLeader() {
			return i
		}
	}
	return -1
}

// probe returns a Status client of candidate i's member (Raft), opening it
// on first use.
func (r *electionRig) probe(ctx context.Context, i int) (core.MetadataBackend, error) {
	c := r.cands[i]
	c.mu.Lock()
	p := c.probe
	c.mu.Unlock()
	if p != nil {
		return p, nil
	}
	p, err := c.m.client(ctx, core.ClientOptions{Name: "bench-election-probe"})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.probe = p
	c.mu.Unlock()
	return p, nil
}

func (r *electionRig) dropProbe(i int) {
	c := r.cands[i]
	c.mu.Lock()
	p := c.probe
	c.probe = nil
	c.mu.Unlock()
	if p != nil {
		p.Close()
	}
}

// KillLeaderAndWait SIGKILLs the leader coordinator's member, times the
// phases of the election among the others, then restarts the killed member
// (its coordinator reconnects and campaigns again).
func (r *electionRig) KillLeaderAndWait(ctx context.Context) (ElectionKill, error) {
	var k ElectionKill
	if r.restoreErr != nil {
		// Try once more before giving up on this kill.
		if err := r.restore(ctx, r.restoreIdx); err != nil {
			return k, fmt.Errorf("the previous kill's member could not be restored: %w (first attempt: %v)", err, r.restoreErr)
		}
		r.restoreErr = nil
	}
	l := r.leader()
	if l < 0 {
		return k, errors.New("no coordinator leads before the kill")
	}
	_, oldEpoch := r.cands[l].won()
	pid := r.cands[l].m.pid()
	if pid <= 0 {
		return k, fmt.Errorf("%s: no process to kill", r.cands[l].m.label)
	}
	survivors := make([]int, 0, len(r.cands)-1)
	for i := range r.cands {
		if i != l {
			survivors = append(survivors, i)
		}
	}
	snaps, nodes := make([]int64, len(r.cands)), make([]int64, len(r.cands))
	for i, c := range r.cands {
		snaps[i], nodes[i] = c.reads.snapshots.Load(), c.reads.nodes.Load()
	}
	wctx, cancel := context.WithTimeout(ctx, electionWaitBound)
	defer cancel()
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return k, fmt.Errorf("kill %s (pid %d): %w", r.cands[l].m.label, pid, err)
	}
	since := func(t time.Time) float64 { return micros(t.Sub(t0)) }

	// The survivor that serves as leader.
	w := -1
	for w < 0 {
		for _, i := range survivors {
			if r.cands[i].srv.IsLeader() {
				w = i
				break
			}
		}
		if w >= 0 {
			break
		}
		select {
		case <-wctx.Done():
			return k, fmt.Errorf("no coordinator serves as leader within %v of killing %s: %w", electionWaitBound, r.cands[l].m.label, wctx.Err())
		case <-time.After(electionRolePoll):
		}
	}
	servingAt := time.Now()
	ack := r.ack
	if ack == nil {
		ack = func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
			return err
		}
	}
	if err := r.cands[w].admin.Admin(wctx, ack); err != nil {
		return k, fmt.Errorf("new leader %s: admin API: %w", r.cands[w].m.label, err)
	}
	k.TotalMicros = since(time.Now())
	k.TreeSnapshots = r.cands[w].reads.snapshots.Load() - snaps[w]
	k.NodesRead = r.cands[w].reads.nodes.Load() - nodes[w]
	k.ImageNodes = r.cands[w].srv.ImageNodes()
	k.Killed, k.Winner = r.cands[l].m.label, r.cands[w].m.label
	k.ServingMicros = since(servingAt)
	wonAt, epoch := r.cands[w].won()
	if wonAt.After(t0) {
		k.CampaignMicros = since(wonAt)
		k.EpochStep = epoch - oldEpoch
	}
	// Restore the killed member, outside the measurement. The measurement
	// stands either way; a rig that could not be restored fails the next
	// kill with this reason.
	r.restoreErr, r.restoreIdx = r.restore(ctx, l), l
	return k, nil
}

// waitLoaded waits until every coordinator's image has loaded on its
// current backend client and, with warm, its bucket states are current
// with it (a standby is warm), at most bound.
func (r *electionRig) waitLoaded(ctx context.Context, bound time.Duration, warm bool) error {
	deadline := time.Now().Add(bound)
	for {
		cold := ""
		for _, c := range r.cands {
			c.mu.Lock()
			if c.loaded < c.opens || c.opens == 0 {
				cold = c.m.label
			}
			c.mu.Unlock()
			if warm && !c.srv.Warm() {
				cold = c.m.label
			}
		}
		if cold == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the coordinator of %s did not load its image within %v", cold, bound)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// restore restarts killed member i and, on Raft, waits until it has
// applied what the leader committed, so that the next kill leaves a
// working quorum.
func (r *electionRig) restore(ctx context.Context, i int) error {
	r.dropProbe(i)
	c := r.cands[i]
	m := c.m
	m.close()
	rctx, cancel := context.WithTimeout(ctx, memberRecoveryBound)
	defer cancel()
	before, _ := c.counts()
	if err := m.start(rctx); err != nil {
		return err
	}
	// Its coordinator reconnects by itself: wait until it campaigns on a
	// client of the restarted member, so that every kill starts from n campaigning coordinators.
	for {
		_, campaigning := c.counts()
		if campaigning > before {
			break
		}
		select {
		case <-rctx.Done():
			return fmt.Errorf("the coordinator of %s did not campaign again: %w", m.label, rctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if r.backend != Raft {
		return nil
	}
	l := r.leader()
	if l < 0 {
		return errors.New("no leader to catch up with")
	}
	lc, err := r.probe(rctx, l)
	if err != nil {
		return err
	}
	rc, err := r.probe(rctx, i)
	if err != nil {
		return err
	}
	// A restarted voter reports the leader it knew from disk at once, so
	// its leader id proves nothing: wait for the applied index.
	lst, err := lc.Status(rctx)
	if err != nil {
		return fmt.Errorf("leader status: %w", err)
	}
	for {
		st, err := rc.Status(rctx)
		if err == nil && st.AppliedIndex >= lst.CommitIndex && st.LeaderID != "" {
			return nil
		}
		select {
		case <-rctx.Done():
			return fmt.Errorf("%s did not catch up with the leader: %w", m.label, rctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close stops every coordinator and member.
func (r *electionRig) Close() error {
	for i, c := range r.cands {
		c.cancel()
		select {
		case <-c.served:
		case <-time.After(30 * time.Second):
		}
		c.admin.Close()
		r.dropProbe(i)
		c.m.close()
	}
	r.cands = nil
	return nil
}

// electionResults calls f for every election result of the report.
func (rep *Report) electionResults(f func(row Row, res Result)) {
	for _, row := range rep.Rows {
		for _, res := range row.Results {
			if res.Election != nil && res.Available() {
				f(row, res)
			}
		}
	}
}

// stepsText renders the epoch steps ("1:48 2:2").
func (d *ElectionDetail) stepsText() string {
	keys := make([]string, 0, len(d.EpochSteps))
	for k := range d.EpochSteps {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b []byte
	for i, k := range keys {
		if i > 0 {
			b = append(b, ' ')
		}
		b = fmt.Appendf(b, "%s:%d", k, d.EpochSteps[k])
	}
	return string(b)
}

// writeElections writes the election rows' phases as plain text.
func (rep *Report) writeElections(w io.Writer) {
	first := true
	rep.electionResults(func(row Row, res Result) {
		if first {
			fmt.Fprintln(w, "\nelection phases (from the SIGKILL; epoch steps: kills by how many epochs the election took):")
			first = false
		}
		fmt.Fprintf(w, "  %s on %s, %d kills, epoch steps %s\n", row.ID, res.Backend, res.N, res.Election.stepsText())
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, p := range res.Election.Phases {
			fmt.Fprintf(tw, "    %s\tp50 %s\tp90 %s\tp99 %s\tmax %s\tn %d\n", p.Phase, FormatDuration(p.P50Micros),
				FormatDuration(p.P90Micros), FormatDuration(p.P99Micros), FormatDuration(p.MaxMicros), p.N)
		}
		tw.Flush()
	})
}

// writeElectionsMarkdown writes the election rows' phases as a Markdown
// table.
func (rep *Report) writeElectionsMarkdown(w io.Writer) {
	first := true
	rep.electionResults(func(row Row, res Result) {
		if first {
			fmt.Fprintln(w, "\n| election row | backend | phase (from the SIGKILL) | p50 | p90 | p99 | max | n |")
			fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|")
			first = false
		}
		for _, p := range res.Election.Phases {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %d |\n", row.ID, res.Backend, p.Phase,
				FormatDuration(p.P50Micros), FormatDuration(p.P90Micros), FormatDuration(p.P99Micros), FormatDuration(p.MaxMicros), p.N)
		}
		fmt.Fprintf(w, "| %s | %s | epoch steps (kills) | %s | | | | |\n", row.ID, res.Backend, res.Election.stepsText())
	})
}
