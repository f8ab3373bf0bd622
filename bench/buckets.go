package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
	"github.com/metaplane/metaplane/tabletserver"
)

// The buckets. rows: the leader coordinator's bucket-leadership
// controller (docs/buckets.md) on a cluster of its own, three
// `metaplane coordinator` processes per backend and measurement, with
// simulated tablet servers in the bench process.
//
//   - buckets.tablet-loss, buckets.tablet-loss-large: a tablet server
//     leading N buckets is lost; the time from its registration's
//     deletion to the survivor being told every bucket's new leadership.
//     Replication factor 2 over 2 tablet servers: 2N buckets, each
//     server leads N, and every bucket changes (the lost server leaves
//     every ISR), so the controller writes 2N records and the survivor's
//     notification carries 2N buckets. One measurement per N and backend.
//   - buckets.adjust-isr-batch, buckets.adjust-isr-single: AdjustIsr
//     updates per second from adjustClients concurrent callers, each
//     flipping the follower out of and back into the ISR of buckets the
//     caller leads, adjustBatch buckets per request or one.
const (
	bucketsLossSmall      = 10_000
	bucketsLossLarge      = 50_000
	bucketsLossSmallQuick = 1_000
	bucketsLossLargeQuick = 5_000
	// bucketsPerTable is the size of the rows' tables. A table's buckets
	// are created in one transaction (two nodes per bucket): on ZooKeeper
	// that transaction must fit its 1 MiB request limit (jute.maxbuffer),
	// 2 000 buckets fit and 3 000 do not, far below max.bucket.num
	// (20 000).
	bucketsPerTable = 2_000
	// bucketsSession is the tablet servers' lease on Raft
	// (coordinator.tablet-server.session-timeout): a lost server's
	// registration goes this long after its last heartbeat.
	bucketsSession = 4 * time.Second
	// bucketsSetupBound bounds creating the tables and the first
	// notifications of one measurement.
	bucketsSetupBound = 5 * time.Minute
	// bucketsLossBound bounds the wait for the expiry and then for the
	// re-election and the notification.
	bucketsLossBound = time.Minute
	bucketsDB        = "bucketbench"

	adjustClients     = 4
	adjustBatch       = 500
	adjustWindow      = 10 * time.Second
	adjustWindowQuick = 3 * time.Second
)

// The two forms of the AdjustIsr rows.
const (
	AdjustBatched = "batch"
	AdjustSingle  = "single"
)

// Buckets is what the buckets. rows measured, for the targets.
type Buckets struct {
	Loss   []BucketLoss    `json:"tablet_loss,omitempty"`
	Adjust []AdjustIsrRate `json:"adjust_isr,omitempty"`
}

// BucketLoss is one tablet-server loss.
type BucketLoss struct {
	Backend string `json:"backend"`
	// Buckets is every bucket of the cluster; Led those the lost server
	// led.
	Buckets int `json:"buckets"`
	Led     int `json:"led"`
	// NotifiedMicros is the sample: from the lost server's registration
	// being deleted (its lease expiry applied, its session closed: when
	// the bench's watch, on a follower coordinator's metadata stream or
	// through a ZooKeeper client of its own, delivers the deletion) to the
	// surviving server receiving a NotifyLeaderAndIsr with every one of
	// its buckets and none naming the lost server (as leader or ISR
	// member). The notifier sends only records read back from the
	// leader's metadata image after the round's writes, so every record
	// was written by then.
	NotifiedMicros float64 `json:"notified_us"`
	// WrittenMicros is from the same moment to the last of the lost
	// server's buckets' LeaderAndIsr records with a new leader arriving on
	// the metadata stream (Raft: a follower coordinator's stream, which
	// has it shortly after the leader wrote it);
	// 0 where not observed (ZooKeeper: the bench watches only the
	// registrations, a watch of every record would load the store).
	WrittenMicros float64 `json:"written_us,omitempty"`
	// RecordsSeen counts the lost server's buckets whose record the bench
	// saw re-led on the metadata stream: Led where it follows the stream,
	// else 0. (WrittenMicros may be 0 with every record seen: the
	// deletion and the records arrived in one response.)
	RecordsSeen int `json:"records_seen,omitempty"`
	// FirstWrittenMicros is, likewise, to the first of them: the
	// controller's pause and its round's reads and elections come before
	// it, its writes between it and WrittenMicros.
	FirstWrittenMicros float64 `json:"first_written_us,omitempty"`
	// ExpiryMicros is from the lost server's last act (its heartbeats
	// stopped; its session closed) to its registration's deletion.
	ExpiryMicros float64 `json:"expiry_us"`
	// LeaderCPUSec is the CPU the leader coordinator (process and plugin)
	// used from the deletion until the notification; 0: not measured.
	LeaderCPUSec float64 `json:"leader_cpu_s,omitempty"`
	// Notifications counts the survivor's notifications in that time;
	// NotifyBytes is the size of its last (gRPC's default limit on what
	// a server receives is 4 MiB).
	Notifications int `json:"notifications"`
	NotifyBytes   int `json:"notify_bytes"`
}

// AdjustIsrRate is one form of the AdjustIsr rows on one backend.
type AdjustIsrRate struct {
	Backend    string `json:"backend"`
	Form       string `json:"form"`
	Clients    int    `json:"clients"`
	PerRequest int    `json:"per_request"`
	Requests   int64  `json:"requests"`
	// Updates counts the buckets whose ISR changed; Refused the buckets
	// answered with an error code, Failed the requests that failed whole.
	Updates int64 `json:"updates"`
	Refused int64 `json:"refused,omitempty"`
	Failed  int64 `json:"failed,omitempty"`
	// FirstRefusal is the first refused bucket's code and message, or
	// the first failed request's error.
	FirstRefusal  string  `json:"first_refusal,omitempty"`
	WindowSec     float64 `json:"window_s"`
	UpdatesPerSec float64 `json:"updates_per_s"`
}

// Largest returns backend's measurement of the loss of the most buckets,
// or nil.
func (b *Buckets) Largest(backend string) *BucketLoss {
	if b == nil {
		return nil
	}
	var out *BucketLoss
	for i := range b.Loss {
		if l := &b.Loss[i]; l.Backend == backend && (out == nil || l.Led > out.Led) {
			out = l
		}
	}
	return out
}

// Rate returns the AdjustIsr measurement of form on backend, or nil.
func (b *Buckets) Rate(backend, form string) *AdjustIsrRate {
	if b == nil {
		return nil
	}
	for i := range b.Adjust {
		if b.Adjust[i].Backend == backend && b.Adjust[i].Form == form {
			return &b.Adjust[i]
		}
	}
	return nil
}

func bucketsSpecs() []rowSpec {
	const note = "measured once per run, after the other rows, each on a cluster of its own: three coordinator processes, simulated tablet servers in the bench process"
	both := []string{Raft, ZooKeeper}
	return []rowSpec{
		{id: "buckets.tablet-loss", title: "bucket leadership: tablet server lost, re-led and notified", group: "bucket leadership", metric: MetricP50, note: note, buckets: true, backends: both},
		{id: "buckets.tablet-loss-large", title: "bucket leadership: tablet server lost, re-led and notified (large)", group: "bucket leadership", metric: MetricP50, note: note, buckets: true, backends: both},
		{id: "buckets.adjust-isr-batch", title: fmt.Sprintf("AdjustIsr: ISR updates/s, %d buckets per request", adjustBatch), group: "bucket leadership", metric: MetricThroughput, note: note, buckets: true, backends: both},
		{id: "buckets.adjust-isr-single", title: "AdjustIsr: ISR updates/s, one bucket per request", group: "bucket leadership", metric: MetricThroughput, note: note, buckets: true, backends: both},
	}
}

// lossSizes are the N of the tablet-loss rows (buckets led by the lost
// server), by row id.
func lossSizes(quick bool) map[string]int {
	if quick {
		return map[string]int{"buckets.tablet-loss": bucketsLossSmallQuick, "buckets.tablet-loss-large": bucketsLossLargeQuick}
	}
	return map[string]int{"buckets.tablet-loss": bucketsLossSmall, "buckets.tablet-loss-large": bucketsLossLarge}
}

// runBuckets measures the buckets. rows on each backend of the run that
// has them, each measurement on a new cluster.
func runBuckets(ctx context.Context, env *runEnv, specs []rowSpec, systems map[string]*System) ([]Row, *Buckets) {
	fig := &Buckets{}
	results := map[string]map[string]Result{}
	// details are what the notes add per backend, by row id: the
	// tablet-loss rows' phases, the AdjustIsr rows' refusals.
	details := map[string][]string{}
	set := func(id, backend string, res Result) {
		if results[id] == nil {
			results[id] = map[string]Result{}
		}
		results[id][backend] = res
	}
	selected := map[string]bool{}
	for _, s := range specs {
		selected[s.id] = true
	}
	sizes := lossSizes(env.opts.Quick)
	window := adjustWindow
	if env.opts.Quick {
		window = adjustWindowQuick
	}
	for _, backend := range env.opts.Backends {
		if backend != Raft && backend != ZooKeeper {
			continue
		}
		zk := ""
		if backend == ZooKeeper {
			s := systems[ZooKeeper]
			if s == nil || s.ZooKeeperAddress == "" {
				for _, spec := range specs {
					set(spec.id, backend, Result{Backend: backend, Unavailable: "ZooKeeper did not start"})
				}
				continue
			}
			zk = s.ZooKeeperAddress
		}
		for _, id := range []string{"buckets.tablet-loss", "buckets.tablet-loss-large"} {
			if !selected[id] || ctx.Err() != nil {
				continue
			}
			n := sizes[id]
			env.opts.logf("  buckets: %s, tablet server leading %d buckets lost ...", backend, n)
			var loss BucketLoss
			err := withBucketRig(ctx, env, backend, zk, func(rig *bucketRig) error {
				var err error
				loss, err = measureTabletLoss(ctx, rig, n, bucketsPerTable, env.opts.logf)
				return err
			})
			if err != nil {
				env.opts.logf("    %v", err)
				set(id, backend, Result{Backend: backend, Unavailable: err.Error()})
				continue
			}
			fig.Loss = append(fig.Loss, loss)
			details[id] = append(details[id], lossDetail(loss))
			d := time.Duration(loss.NotifiedMicros * 1e3)
			set(id, backend, resultFromSummary(backend, Summarize([]time.Duration{d}, 1, d), 1, 0, nil))
			env.opts.logf("    %d buckets re-led, the survivor notified in %s (records written from %s to %s; its notifications %d, the last %d bytes; expiry %s after the last heartbeat; leader CPU %.2f s)",
				loss.Led, FormatDuration(loss.NotifiedMicros), FormatDuration(loss.FirstWrittenMicros), FormatDuration(loss.WrittenMicros),
				loss.Notifications, loss.NotifyBytes, FormatDuration(loss.ExpiryMicros), loss.LeaderCPUSec)
		}
		if (selected["buckets.adjust-isr-batch"] || selected["buckets.adjust-isr-single"]) && ctx.Err() == nil {
			env.opts.logf("  buckets: %s, AdjustIsr, %d clients ...", backend, adjustClients)
			var rates []AdjustIsrRate
			err := withBucketRig(ctx, env, backend, zk, func(rig *bucketRig) error {
				var err error
				rates, err = measureAdjustIsr(ctx, rig, adjustClients, adjustBatch, window)
				return err
			})
			if err != nil {
				env.opts.logf("    %v", err)
			}
			for _, r := range rates {
				fig.Adjust = append(fig.Adjust, r)
				d := time.Duration(r.WindowSec * float64(time.Second))
				res := Result{Backend: backend, N: int(r.Requests), Ops: r.Updates, OpsPerSec: r.UpdatesPerSec, Errors: int(r.Failed)}
				set("buckets.adjust-isr-"+r.Form, backend, res)
				if r.Refused > 0 {
					id := "buckets.adjust-isr-" + r.Form
					details[id] = append(details[id], fmt.Sprintf("%s: %d buckets refused, the first: %s", backend, r.Refused, r.FirstRefusal))
				}
				env.opts.logf("    %s: %s updates (%d requests, %d updates, %d refused, %d failed in %v)", r.Form, FormatRate(r.UpdatesPerSec), r.Requests, r.Updates, r.Refused, r.Failed, d)
				if r.FirstRefusal != "" {
					env.opts.logf("      first refusal: %s", r.FirstRefusal)
				}
			}
			if err != nil {
				for _, form := range []string{AdjustBatched, AdjustSingle} {
					if _, ok := results["buckets.adjust-isr-"+form][backend]; !ok {
						set("buckets.adjust-isr-"+form, backend, Result{Backend: backend, Unavailable: err.Error()})
					}
				}
			}
		}
	}
	var rows []Row
	for _, s := range specs {
		row := Row{ID: s.id, Title: s.title, Group: s.group, Metric: s.metric, Note: s.note}
		if n, ok := sizes[s.id]; ok {
			row.Title = fmt.Sprintf("bucket leadership: tablet server leading %d buckets lost, re-led and notified", n)
			row.Note = fmt.Sprintf("replication factor 2 over 2 tablet servers, %d buckets in tables of %d; from the lost server's registration deleted to the survivor notified without it (one measurement)%s; %s",
				2*n, bucketsPerTable, quickLossNote(env, s.id), s.note)
		} else {
			row.Note = fmt.Sprintf("%d clients, each flipping the follower out of and into the ISR of buckets it leads (%d buckets, replication factor 2 over 2 tablet servers), for %v; %s",
				adjustClients, 2*adjustClients*adjustBatch, window, s.note)
		}
		if d := details[s.id]; len(d) > 0 {
			row.Note += "; " + strings.Join(d, "; ")
		}
		for _, backend := range env.opts.Backends {
			if res, ok := results[s.id][backend]; ok {
				row.Results = append(row.Results, res)
			}
		}
		row.computeRatio()
		rows = append(rows, row)
	}
	if len(fig.Loss) == 0 && len(fig.Adjust) == 0 {
		return rows, nil
	}
	return rows, fig
}

// lossDetail is a loss's phases, for its row's note.
func lossDetail(l BucketLoss) string {
	d := l.Backend + ":"
	if l.RecordsSeen > 0 {
		d += fmt.Sprintf(" records seen re-led from %s to %s,", FormatDuration(l.FirstWrittenMicros), FormatDuration(l.WrittenMicros))
	}
	return d + fmt.Sprintf(" %d notification(s) to the survivor, the last %.2f MB; leader CPU %.2f s (coordinator + plugin)",
		l.Notifications, float64(l.NotifyBytes)/1e6, l.LeaderCPUSec)
}

func quickLossNote(env *runEnv, id string) string {
	if !env.opts.Quick {
		return ""
	}
	return fmt.Sprintf(" (--quick: %d buckets led, not %d)", lossSizes(true)[id], lossSizes(false)[id])
}

// bucketRig is the cluster one buckets. measurement runs on.
type bucketRig struct {
	backend string
	admin   *adminclient.Client
	// session, on a backend without leases (ZooKeeper), opens a client
	// with a session of its own: a tablet server registers with an
	// ephemeral node in it. Nil: tablet servers register through the
	// coordinator (RegisterTabletServer) and heartbeat their lease.
	session func(ctx context.Context) (core.MetadataBackend, error)
	// leaderCPU reads the leader coordinator's CPU so far; nil: not
	// measured.
	leaderCPU func() time.Duration
}

var bucketRigs atomic.Int64

// withBucketRig starts three coordinator processes on backend (a new
// Raft cluster, or a new root of the ZooKeeper ensemble at zk), runs f
// on them and stops them.
func withBucketRig(ctx context.Context, env *runEnv, backend, zk string, f func(rig *bucketRig) error) error {
	k := bucketRigs.Add(1)
	dir := filepath.Join(env.opts.WorkDir, fmt.Sprintf("buckets-%s-%d", backend, k))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	o := clusterOptions{settings: map[string]string{"coordinator.tablet-server.session-timeout": bucketsSession.String()}}
	rig := &bucketRig{backend: backend}
	if backend == ZooKeeper {
		o.zooKeeper, o.root = zk, fmt.Sprintf("/metaplane-bench-buckets-%d", k)
		m, err := env.newMember(ZooKeeper, "ZooKeeper plugin (buckets. tablet servers)", map[string]string{"zookeeper.address": zk, "zookeeper.path.root": o.root}, true)
		if err != nil {
			return err
		}
		if err := m.start(ctx); err != nil {
			return err
		}
		defer m.close()
		rig.session = func(ctx context.Context) (core.MetadataBackend, error) {
			return m.client(ctx, core.ClientOptions{Name: "bench-tablet-server"})
		}
	}
	cs, err := startCoordinators(ctx, env, dir, o)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range cs {
			c.stop()
		}
	}()
	var addrs []string
	for _, c := range cs {
		addrs = append(addrs, c.client)
	}
	rig.admin, err = adminclient.NewClient(addrs)
	if err != nil {
		return err
	}
	defer rig.admin.Close()
	leader, err := streamLeader(ctx, cs, rig.admin)
	if err != nil {
		return err
	}
	rig.leaderCPU = cs[leader].cpu
	return f(rig)
}

// bucketTablet is a simulated tablet server: a registration, and a
// tablet service that keeps the last NotifyLeaderAndIsr and, once told
// which server is lost, when the first notification without it arrived.
type bucketTablet struct {
	adminv1.UnimplementedTabletServiceServer
	id   int32
	addr string
	g    *grpc.Server
	// end ends the registration: its heartbeats stop (the lease expires),
	// or its session is closed.
	end func()

	mu    sync.Mutex
	last  *adminv1.NotifyLeaderAndIsrRequest
	lost  int32 // the lost server watched for; 0: none
	want  int   // the buckets a notification must carry to count
	count int   // notifications since lost was set
	clean time.Time
}

func newBucketTablet(id int32) (*bucketTablet, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &bucketTablet{id: id, addr: l.Addr().String(), g: grpc.NewServer(), end: func() {}}
	adminv1.RegisterTabletServiceServer(t.g, t)
	go t.g.Serve(l)
	return t, nil
}

func (t *bucketTablet) NotifyLeaderAndIsr(ctx context.Context, r *adminv1.NotifyLeaderAndIsrRequest) (*adminv1.NotifyLeaderAndIsrResponse, error) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = r
	if t.lost != 0 {
		t.count++
		if t.clean.IsZero() && len(r.Buckets) >= t.want && !namesServer(r.Buckets, t.lost) {
			t.clean = now
		}
	}
	return &adminv1.NotifyLeaderAndIsrResponse{CoordinatorEpoch: r.CoordinatorEpoch}, nil
}

func namesServer(bs []*adminv1.NotifyLeaderAndIsrRequest_BucketState, id int32) bool {
	for _, b := range bs {
		if b.Leader == id || slices.Contains(b.Isr, id) {
			return true
		}
	}
	return false
}

// buckets is the last notification's buckets (nil before one).
func (t *bucketTablet) buckets() []*adminv1.NotifyLeaderAndIsrRequest_BucketState {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil {
		return nil
	}
	return t.last.Buckets
}

func (t *bucketTablet) cleanAt() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.clean
}

func (t *bucketTablet) close() {
	t.end()
	t.g.Stop()
}

// register registers t on rig: through the coordinator with heartbeats,
// or with an ephemeral node in a session of its own.
func (rig *bucketRig) register(ctx context.Context, t *bucketTablet) error {
	listeners := "CLIENT://" + t.addr
	if rig.session == nil {
		keep, cancel := context.WithCancel(context.Background())
		if err := registerLeased(ctx, keep, rig.admin, t.id, listeners); err != nil {
			cancel()
			return err
		}
		t.end = cancel
		return nil
	}
	b, err := rig.session(ctx)
	if err != nil {
		return err
	}
	reg := catalog.TabletServerRegistration{Listeners: listeners, RegisterTimestamp: time.Now().UnixMilli()}
	if _, _, err := core.Create(ctx, b, catalog.TabletServerPath(t.id), reg.Marshal(), core.CreateOptions{Mode: core.Ephemeral, MakeParents: true}); err != nil {
		b.Close()
		return fmt.Errorf("register tablet server %d: %w", t.id, err)
	}
	t.end = func() { b.Close() }
	return nil
}

// watchRegistrations follows the changes under /tabletservers from now:
// on a follower coordinator's metadata stream (every record), or, with sessions
// (ZooKeeper), through a client of the store watching the registrations
// only. records says which.
func (rig *bucketRig) watchRegistrations(ctx context.Context) (ch <-chan core.WatchResponse, records bool, stop func(), err error) {
	if rig.session == nil {
		// From a follower coordinator (as a tablet server fetches by
		// default): the records the leader writes cost it nothing more
		// than they cost it on ZooKeeper, where the bench follows none.
		src, err := tabletserver.NewMetadataSource(rig.admin, tabletserver.SourceOptions{From: tabletserver.StreamFromAny,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			return nil, false, nil, err
		}
		snap, err := src.Snapshot(ctx, catalog.TabletServerIDsPath)
		if err != nil {
			return nil, false, nil, err
		}
		wctx, cancel := context.WithCancel(ctx)
		ch, err := src.Watch(wctx, catalog.TabletServersRoot, snap.Revision+1)
		if err != nil {
			cancel()
			return nil, false, nil, err
		}
		return ch, true, cancel, nil
	}
	b, err := rig.session(ctx)
	if err != nil {
		return nil, false, nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	ch, err = b.Watch(wctx, catalog.TabletServerIDsPath, 0)
	if err != nil {
		cancel()
		b.Close()
		return nil, false, nil, err
	}
	return ch, false, func() { cancel(); b.Close() }, nil
}

// setupBuckets starts and registers tablet servers 1 and 2, creates
// total buckets in tables of perTable (replication factor 2), and waits
// until each server was told all of them.
func setupBuckets(ctx context.Context, rig *bucketRig, total, perTable int) ([]*bucketTablet, error) {
	var ts []*bucketTablet
	for id := int32(1); id <= 2; id++ {
		t, err := newBucketTablet(id)
		if err != nil {
			return ts, err
		}
		ts = append(ts, t)
		if err := rig.register(ctx, t); err != nil {
			return ts, err
		}
	}
	// The leader must see both registrations before a table is placed:
	// one made in a ZooKeeper session reaches its image through its watch,
	// and a table created before would get no replica on that server.
	if err := retrySetup(ctx, func(ctx context.Context) error {
		return rig.admin.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			r, err := a.ListTabletServers(ctx, &adminv1.ListTabletServersRequest{})
			if err == nil && len(r.Servers) < len(ts) {
				err = fmt.Errorf("%d of %d tablet servers registered", len(r.Servers), len(ts))
			}
			return err
		})
	}); err != nil {
		return ts, err
	}
	if err := retrySetup(ctx, func(ctx context.Context) error {
		return rig.admin.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: bucketsDB, IgnoreIfExists: true})
			return err
		})
	}); err != nil {
		return ts, fmt.Errorf("create database %s: %w", bucketsDB, err)
	}
	for i, left := 0, total; left > 0; i++ {
		n := min(left, perTable)
		left -= n
		name := fmt.Sprintf("t%d", i)
		if err := retrySetup(ctx, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			return rig.admin.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
				_, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: bucketsDB, Table: name, IgnoreIfExists: true,
					Descriptor_: &adminv1.TableDescriptor{Columns: []*adminv1.Column{{Name: "k", Type: "BIGINT"}}, BucketCount: int32(n), ReplicationFactor: 2}})
				return err
			})
		}); err != nil {
			return ts, fmt.Errorf("create table %s (%d buckets): %w", name, n, err)
		}
	}
	deadline := time.Now().Add(bucketsSetupBound)
	for _, t := range ts {
		for len(t.buckets()) < total {
			if time.Now().After(deadline) || ctx.Err() != nil {
				per := map[int64]int{}
				for _, b := range t.buckets() {
					per[b.TableId]++
				}
				return ts, fmt.Errorf("tablet server %d was told %d of the %d buckets within %v (by table id: %v)", t.id, len(t.buckets()), total, bucketsSetupBound, per)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return ts, nil
}

// measureTabletLoss measures one loss of tablet server 1, which leads
// about n of 2n buckets (replication factor 2 over servers 1 and 2).
func measureTabletLoss(ctx context.Context, rig *bucketRig, n, perTable int, logf func(string, ...any)) (BucketLoss, error) {
	m := BucketLoss{Backend: rig.backend, Buckets: 2 * n}
	ts, err := setupBuckets(ctx, rig, 2*n, perTable)
	defer func() {
		for _, t := range ts {
			t.close()
		}
	}()
	if err != nil {
		return m, err
	}
	lost, survivor := ts[0], ts[1]
	pending := map[string]bool{}
	for _, b := range lost.buckets() {
		if b.Leader == lost.id {
			pending[catalog.BucketKey{TableID: b.TableId, PartitionID: b.PartitionId, Bucket: b.Bucket}.Path()] = true
		}
	}
	m.Led = len(pending)
	if m.Led < n*9/10 {
		return m, fmt.Errorf("tablet server %d leads %d buckets, want about %d", lost.id, m.Led, n)
	}
	ch, records, stop, err := rig.watchRegistrations(ctx)
	if err != nil {
		return m, fmt.Errorf("watch the registrations: %w", err)
	}
	defer stop()
	survivor.mu.Lock()
	survivor.lost, survivor.want = lost.id, m.Buckets
	survivor.mu.Unlock()
	logf("    %d buckets, server %d leads %d: it stops", m.Buckets, lost.id, m.Led)
	ended := time.Now()
	lost.end()
	lostPath := catalog.TabletServerPath(lost.id)
	var expired, first, written time.Time
	var cpu0 time.Duration
	deadline := time.Now().Add(bucketsSession + bucketsLossBound)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case resp, ok := <-ch:
			now := time.Now()
			if !ok {
				return m, errors.New("the watch of the registrations ended")
			}
			if resp.Err != nil {
				return m, fmt.Errorf("the watch of the registrations: %w", resp.Err)
			}
			for _, ev := range resp.Events {
				switch {
				case ev.Path == catalog.TabletServerPath(survivor.id) && ev.Type == core.EventDeleted:
					return m, fmt.Errorf("the surviving tablet server %d's registration went too", survivor.id)
				case ev.Path == lostPath && ev.Type == core.EventDeleted && expired.IsZero():
					expired = now
					if rig.leaderCPU != nil {
						cpu0 = rig.leaderCPU()
					}
				case pending[ev.Path] && ev.Type != core.EventDeleted:
					if rec, err := catalog.UnmarshalLeaderAndIsr(ev.Data); err == nil && rec.Leader != lost.id && !slices.Contains(rec.ISR, lost.id) {
						delete(pending, ev.Path)
						if first.IsZero() {
							first = now
						}
						if len(pending) == 0 {
							written = now
						}
					}
				}
			}
		case <-tick.C:
		case <-ctx.Done():
			return m, fmt.Errorf("%w (expiry seen %v, %d of the lost server's buckets not seen re-led, survivor notified without it %v)",
				ctx.Err(), !expired.IsZero(), len(pending), !survivor.cleanAt().IsZero())
		}
		survivor.mu.Lock()
		clean, count, last := survivor.clean, survivor.count, survivor.last
		survivor.mu.Unlock()
		if !expired.IsZero() && !clean.IsZero() && (!records || !written.IsZero()) {
			if rig.leaderCPU != nil {
				m.LeaderCPUSec = round3((rig.leaderCPU() - cpu0).Seconds())
			}
			m.ExpiryMicros = micros(expired.Sub(ended))
			m.NotifiedMicros = micros(max(clean.Sub(expired), 0))
			if records {
				m.WrittenMicros = micros(max(written.Sub(expired), 0))
				m.FirstWrittenMicros = micros(max(first.Sub(expired), 0))
				m.RecordsSeen = m.Led - len(pending)
			}
			m.Notifications = count
			m.NotifyBytes = proto.Size(last)
			return m, nil
		}
		if time.Now().After(deadline) {
			switch {
			case expired.IsZero():
				return m, fmt.Errorf("tablet server %d's registration was not deleted within %v", lost.id, bucketsSession+bucketsLossBound)
			case clean.IsZero():
				return m, fmt.Errorf("the survivor got no notification of all %d buckets without server %d within %v of its expiry (%d notifications)", m.Buckets, lost.id, time.Since(expired).Round(time.Millisecond), count)
			default:
				return m, fmt.Errorf("%d of server %d's buckets not seen re-led on the metadata stream within %v of its expiry", len(pending), lost.id, time.Since(expired).Round(time.Millisecond))
			}
		}
	}
}

// adjustBucket is a caller's view of one bucket it leads.
type adjustBucket struct {
	tableID, partitionID int64
	bucket               int32
	leaderEpoch          int32
	bucketEpoch          int32
	isr                  []int32
}

// measureAdjustIsr measures AdjustIsr updates per second, batched
// (perRequest buckets per request) then single, each for window, with
// clients concurrent callers flipping the follower (server 2) out of and
// back into the ISR of buckets server 1 leads.
func measureAdjustIsr(ctx context.Context, rig *bucketRig, clients, perRequest int, window time.Duration) ([]AdjustIsrRate, error) {
	ts, err := setupBuckets(ctx, rig, 2*clients*perRequest, bucketsPerTable)
	defer func() {
		for _, t := range ts {
			t.close()
		}
	}()
	if err != nil {
		return nil, err
	}
	leader, follower := ts[0].id, ts[1].id
	var led []*adjustBucket
	for _, b := range ts[0].buckets() {
		if b.Leader == leader {
			led = append(led, &adjustBucket{tableID: b.TableId, partitionID: b.PartitionId, bucket: b.Bucket,
				leaderEpoch: b.LeaderEpoch, bucketEpoch: b.BucketEpoch, isr: b.Isr})
		}
	}
	if len(led) < clients*perRequest {
		return nil, fmt.Errorf("tablet server %d leads %d buckets, want %d", leader, len(led), clients*perRequest)
	}
	var out []AdjustIsrRate
	for _, form := range []string{AdjustBatched, AdjustSingle} {
		per := perRequest
		if form == AdjustSingle {
			per = 1
		}
		r := AdjustIsrRate{Backend: rig.backend, Form: form, Clients: clients, PerRequest: per}
		var requests, updates, refused, failed atomic.Int64
		var firstErr atomic.Value
		var wg sync.WaitGroup
		start := time.Now()
		until := start.Add(window)
		for k := 0; k < clients; k++ {
			own := led[k*perRequest : (k+1)*perRequest]
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(until) && ctx.Err() == nil; i++ {
					group := own
					if per == 1 {
						group = own[i%len(own) : i%len(own)+1]
					}
					req := &adminv1.AdjustIsrRequest{ServerId: leader}
					for _, b := range group {
						isr := []int32{leader, follower}
						if slices.Contains(b.isr, follower) {
							isr = []int32{leader}
						}
						req.Buckets = append(req.Buckets, &adminv1.AdjustIsrRequest_Bucket{TableId: b.tableID, PartitionId: b.partitionID,
							Bucket: b.bucket, LeaderEpoch: b.leaderEpoch, BucketEpoch: b.bucketEpoch, NewIsr: isr})
					}
					var resp *adminv1.AdjustIsrResponse
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					err := rig.admin.Tablets(cctx, func(ctx context.Context, t adminv1.TabletServerServiceClient) (err error) {
						resp, err = t.AdjustIsr(ctx, req)
						return err
					})
					cancel()
					requests.Add(1)
					if err == nil && len(resp.Results) != len(group) {
						err = fmt.Errorf("AdjustIsr answered %d results for %d buckets", len(resp.Results), len(group))
					}
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
						continue
					}
					for j, res := range resp.Results {
						b := group[j]
						if res.ErrorCode != "" {
							refused.Add(1)
							firstErr.CompareAndSwap(nil, fmt.Errorf("%s: %s", res.ErrorCode, res.ErrorMessage))
						} else {
							updates.Add(1)
						}
						if res.Leader == leader {
							b.leaderEpoch, b.bucketEpoch, b.isr = res.LeaderEpoch, res.BucketEpoch, res.Isr
						}
					}
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		r.Requests, r.Updates, r.Refused, r.Failed = requests.Load(), updates.Load(), refused.Load(), failed.Load()
		if err, _ := firstErr.Load().(error); err != nil {
			r.FirstRefusal = err.Error()
		}
		r.WindowSec = round3(elapsed.Seconds())
		r.UpdatesPerSec = round3(float64(r.Updates) / elapsed.Seconds())
		if r.Updates == 0 {
			err, _ := firstErr.Load().(error)
			return out, fmt.Errorf("%s: no ISR update in %v: %v", form, elapsed.Round(time.Millisecond), err)
		}
		out = append(out, r)
	}
	return out, nil
}
