// Package coordinator is the coordinator server: it campaigns for
// leadership on a metadata backend; the leader builds the metadata image and
// serves the admin gRPC API (and, on backends with leases and exact
// history, the tablet-server RPCs); a standby serves the metadata stream
// (FetchMetadata, FetchMetadataSnapshot) from its own backend client and
// answers every other call with NOT_LEADER and the leader's address.
package coordinator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/image"
	"github.com/metaplane/metaplane/internal/retry"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// Opener opens a new backend client (with a session of its own). The
// server calls it at start and again when its client is closed under it
// (the plugin died and was restarted).
type Opener func(ctx context.Context) (core.MetadataBackend, error)

// Options configure a Server.
type Options struct {
	// Open opens backend clients. Required.
	Open Opener
	// Listener is where the gRPC services are served. Required; the server
	// closes it when Serve returns.
	Listener net.Listener
	// Credentials, when set, secure the Listener (TLS:
	// credentials.NewTLS); nil serves plaintext. The caller builds them
	// from its configuration; the server reads no file.
	Credentials credentials.TransportCredentials
	// Security authenticates and authorizes the calls (auth.go); the zero
	// value checks nothing.
	Security Security
	// ExtraListeners are more listeners the same services are served on,
	// each with its own credentials and checks (the bench measures a
	// plaintext, a TLS and a TLS-with-authorizer listener of one leader
	// side by side). The server closes them when Serve returns.
	ExtraListeners []ExtraListener
	// TabletTLS, when set, is the TLS configuration the leader dials the
	// tablet servers' tablet service with (NotifyLeaderAndIsr; their
	// client listener is mapped to SSL or SASL_SSL): RootCAs to verify
	// them and the coordinator's own certificate, whose User:<CN> the
	// tablet servers must list in super.users when their authorizer is on.
	// Nil: plaintext.
	TabletTLS *tls.Config
	// TabletUsername and TabletPassword, with TabletTLS, authenticate the
	// leader to a SASL_SSL tablet service (client.security.sasl.*).
	TabletUsername, TabletPassword string
	// AdvertisedListeners is the address given to others, as listeners
	// ("CLIENT://host:port"); default CLIENT://<Listener's address>.
	AdvertisedListeners string
	// ID is the coordinator's id; default a new UUID.
	ID string
	// TabletServerSessionTimeout is the lease of a registered tablet server
	// (coordinator.tablet-server.session-timeout); default 30s.
	TabletServerSessionTimeout time.Duration
	// MetadataStreamMaxWait bounds a FetchMetadata long poll
	// (coordinator.metadata-stream.max-wait); default 500ms.
	MetadataStreamMaxWait time.Duration
	// MaxConcurrentSnapshots is how many metadata snapshots
	// (FetchMetadataSnapshot, FetchMetadataSnapshotStream) the coordinator
	// serves at once, each holding a store snapshot (the stream on a
	// backend with streamed snapshots) or a copy of the whole tree until it
	// is sent; the others wait their turn, within their deadline
	// (coordinator.metadata-stream.max-concurrent-snapshots); default 4.
	MaxConcurrentSnapshots int
	// MetadataStreamFeed is how many change events the coordinator keeps
	// in memory, fed by one watch of its backend client, to serve every
	// FetchMetadata long poll from (a poll from an older offset opens a
	// watch of its own); default DefaultMetadataStreamFeed; negative: no
	// feed, every poll opens its own watch.
	MetadataStreamFeed int
	// IDBlockSize is coordinator.raft.id-block-size; default 1000.
	IDBlockSize int64
	// DefaultReplicationFactor of new tables; default 3 (capped at the
	// registered tablet servers).
	DefaultReplicationFactor int
	// MaxBucketNum is max.bucket.num, the most buckets of a table or
	// partition; default catalog.DefaultMaxBucketNum.
	MaxBucketNum int32
	// MaxPartitionNum is max.partition.num, the most partitions of a
	// table; default catalog.DefaultMaxPartitionNum.
	MaxPartitionNum int
	// RequestRetention is how long the record of an exactly-once admin
	// write (its request id, /metaplane/requests/<id>) is kept, so that a
	// retry within it is answered with the original result; default
	// DefaultRequestRetention.
	RequestRetention time.Duration
	// MaxRequestRecords caps the request records kept: beyond it the
	// oldest are removed first; default DefaultMaxRequestRecords.
	MaxRequestRecords int
	// RequestCleanupInterval is how often the leader removes expired
	// request records; default a tenth of RequestRetention, at most 1m.
	RequestCleanupInterval time.Duration
	// ImageLoadTimeout bounds a new leader's catch-up: its metadata
	// image (kept current while it was a standby, loaded when its backend
	// client opened) brought up to the leadership's start; default
	// 30s. A leader that cannot load its image resigns.
	ImageLoadTimeout time.Duration
	// Logger receives the server's events; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the server's Prometheus metrics; nil: none are
	// registered (they are still kept).
	Registerer prometheus.Registerer
	// PluginRestarts, when set, reports how many times the backend's
	// plugin process has been restarted (metaplane_plugin_restarts_total).
	PluginRestarts func() int
	// Fatal, when set, is closed (or becomes ready) when the backend can
	// no longer be used (the plugin gave up); Serve then returns FatalErr().
	Fatal    <-chan struct{}
	FatalErr func() error
	// Gossip, when set, is the coordinators' membership gossip
	// (coordinator.gossip.enabled): the server announces its client
	// address and role there and lists the members in GetLeader's
	// coordinators. The caller starts and closes it. It never changes the
	// voter set. Nil: no gossip; GetLeader lists this coordinator and the
	// leader it knows.
	Gossip Gossip
}

// ExtraListener is one more listener of Options.ExtraListeners.
type ExtraListener struct {
	Listener    net.Listener
	Credentials credentials.TransportCredentials // nil: plaintext
	Security    Security
}

// Server is a coordinator. Build it with New, run it with Serve.
type Server struct {
	opts    Options
	id      string
	addr    string // advertised listeners
	log     *slog.Logger
	metrics *Metrics

	grpc   *grpc.Server
	extra  []*grpc.Server // of Options.ExtraListeners
	health *healthState
	// backendOpen: a backend client is open (the overall health).
	backendOpen atomic.Bool
	// snapshotSlots holds one token per metadata snapshot being served
	// (Options.MaxConcurrentSnapshots).
	snapshotSlots chan struct{}

	leader atomic.Pointer[leaderState]
	// warmImage is the open client's metadata image, kept current while
	// standby and leader; bucketsSink the leadership's bucket states its
	// changes go to (nil on a standby).
	warmImage   atomic.Pointer[image.Image]
	bucketsSink atomic.Pointer[bucketStates]
	backend     atomic.Pointer[backendRef]
	leaderInfo  atomic.Pointer[core.LeaderInfo]
	requests    inflight // request ids being served
	quorum      atomic.Pointer[quorumNote]
	// streamApplied is the highest revision the metadata stream this
	// coordinator serves has seen (FetchMetadata's applied_offset).
	streamApplied atomic.Int64
	// feed is the metadata stream's in-memory change feed (feed.go).
	feedMu       sync.Mutex
	feed         *changeFeed
	feedsStopped bool
	feedFailed   time.Time // when a feed last failed to start

	mu      sync.Mutex
	leases  map[int32]int64 // tablet server id -> lease id (leader only)
	changed chan struct{}   // closed on every change of role
}

type backendRef struct{ b core.MetadataBackend }

// leaderState is what the leader serves with; it is replaced (never
// modified) when leadership changes.
type leaderState struct {
	lead    core.Leadership
	b       core.MetadataBackend
	cat     *catalog.Catalog
	img     *image.Image
	buckets *bucketStates // the controller's (see controlLoop)
	ctl     *controller
	started time.Time
}

func (l *leaderState) lost() bool {
	select {
	case <-l.lead.Lost():
		return true
	default:
		return false
	}
}

// New returns a coordinator server. Errors: a missing Open or Listener.
func New(opts Options) (*Server, error) {
	if opts.Open == nil || opts.Listener == nil {
		return nil, fmt.Errorf("%w: coordinator: Open and Listener are required", core.ErrInvalidArgument)
	}
	if opts.ID == "" {
		opts.ID = uuid.NewString()
	}
	if opts.AdvertisedListeners == "" {
		opts.AdvertisedListeners = "CLIENT://" + opts.Listener.Addr().String()
	}
	if opts.TabletServerSessionTimeout <= 0 {
		opts.TabletServerSessionTimeout = 30 * time.Second
	}
	if opts.MetadataStreamMaxWait <= 0 {
		opts.MetadataStreamMaxWait = 500 * time.Millisecond
	}
	if opts.MaxConcurrentSnapshots <= 0 {
		opts.MaxConcurrentSnapshots = 4
	}
	if opts.RequestRetention <= 0 {
		opts.RequestRetention = DefaultRequestRetention
	}
	if opts.MaxRequestRecords <= 0 {
		opts.MaxRequestRecords = DefaultMaxRequestRecords
	}
	if opts.RequestCleanupInterval <= 0 {
		opts.RequestCleanupInterval = min(opts.RequestRetention/10, time.Minute)
	}
	if opts.MetadataStreamFeed == 0 {
		opts.MetadataStreamFeed = DefaultMetadataStreamFeed
	}
	if opts.IDBlockSize <= 0 {
		opts.IDBlockSize = 1000
	}
	if opts.ImageLoadTimeout <= 0 {
		opts.ImageLoadTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{
		opts: opts, id: opts.ID, addr: opts.AdvertisedListeners,
		log:     opts.Logger.With("coordinator", opts.ID),
		leases:  map[int32]int64{},
		changed: make(chan struct{}),

		snapshotSlots: make(chan struct{}, opts.MaxConcurrentSnapshots),
	}
	s.metrics = newMetrics(s, opts.Registerer)
	s.health = newHealth()
	s.grpc = s.newGRPC(opts.Credentials, &s.opts.Security)
	for i := range s.opts.ExtraListeners {
		x := &s.opts.ExtraListeners[i]
		s.extra = append(s.extra, s.newGRPC(x.Credentials, &x.Security))
	}
	s.publish()
	return s, nil
}

// newGRPC is the gRPC server of one listener: its credentials (nil:
// plaintext), its authentication and authorization, the services.
func (s *Server) newGRPC(creds credentials.TransportCredentials, sec *Security) *grpc.Server {
	sopts := s.metrics.serverOptions()
	if creds != nil {
		sopts = append(sopts, grpc.Creds(creds))
	}
	// Outermost first: the metrics (above), then errorStatus, which gives
	// the authorization's and the handler's errors their status.
	sopts = append(sopts, grpc.ChainUnaryInterceptor(s.unaryErrors, s.unaryAuth(sec)), grpc.ChainStreamInterceptor(s.streamErrors, s.streamAuth(sec)))
	g := grpc.NewServer(sopts...)
	adminv1.RegisterAdminServiceServer(g, &adminService{s: s})
	adminv1.RegisterTabletServerServiceServer(g, &tabletServerService{s: s})
	healthpb.RegisterHealthServer(g, s.health.srv)
	s.metrics.grpc.InitializeMetrics(g)
	return g
}

// ID returns the coordinator's id.
func (s *Server) ID() string { return s.id }

// Address returns the advertised listeners ("CLIENT://host:port").
func (s *Server) Address() string { return s.addr }

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// ImageNodes returns the number of nodes in the metadata image of the
// open backend client (kept current on a standby too), 0 when none is
// open.
func (s *Server) ImageNodes() int {
	if img := s.warmImage.Load(); img != nil {
		return img.Len()
	}
	return 0
}

// Warm reports whether the open client's image is loaded and its bucket
// states are current with it: a standby that would take over without
// reading the tree or rebuilding its bucket states.
func (s *Server) Warm() bool {
	img, b := s.warmImage.Load(), s.bucketsSink.Load()
	return img != nil && img.Ready() && b != nil && b.current()
}

// IsLeader reports whether the server is serving as leader now.
func (s *Server) IsLeader() bool {
	l := s.leader.Load()
	return l != nil && !l.lost()
}

// Epoch returns the current leadership's epoch, or -1 when not leading.
func (s *Server) Epoch() int64 {
	if l := s.leader.Load(); l != nil {
		return l.lead.Epoch()
	}
	return -1
}

// RoleChanged returns a channel closed at the server's next change of role.
func (s *Server) RoleChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *Server) setLeader(l *leaderState) {
	s.leader.Store(l)
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	if l == nil {
		s.leases = map[int32]int64{}
	}
	s.mu.Unlock()
	s.metrics.setLeader(l)
	s.health.setLeader(l != nil)
	s.publish()
}

// Serve serves until ctx ends (then it resigns, stops the gRPC server and
// returns nil) or the backend becomes unusable for good (it returns the
// reason). It closes the listener and every client it opened.
func (s *Server) Serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1+len(s.extra))
	serve := func(g *grpc.Server, l net.Listener) {
		if err := g.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("coordinator: serve %s: %w", l.Addr(), err)
		}
	}
	go serve(s.grpc, s.opts.Listener)
	for i, g := range s.extra {
		go serve(g, s.opts.ExtraListeners[i].Listener)
	}
	loopDone := make(chan error, 1)
	go func() { loopDone <- s.run(ctx) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	case err = <-loopDone:
	}
	cancel()
	if err == nil {
		<-loopDone
	}
	s.backendOpen.Store(false)
	s.stopFeeds()
	s.health.shutdown()
	s.grpc.Stop()
	for _, g := range s.extra {
		g.Stop()
	}
	return err
}

// run opens clients and campaigns until ctx ends.
func (s *Server) run(ctx context.Context) error {
	wait := retry.New(100*time.Millisecond, 5*time.Second)
	for ctx.Err() == nil {
		if err := s.fatal(); err != nil {
			return err
		}
		b, err := s.opts.Open(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			d := wait.Next()
			s.log.Warn("opening a backend client failed; retrying", "err", err, "in", d)
			retry.Sleep(ctx, d, s.opts.Fatal)
			continue
		}
		wait.Reset()
		b = s.metrics.wrap(b)
		s.backend.Store(&backendRef{b: b})
		s.backendOpen.Store(true)
		s.health.setBackend(true)
		started := time.Now()
		s.withClient(ctx, b)
		s.backendOpen.Store(false)
		s.health.setBackend(false)
		b.Close()
		if time.Since(started) < time.Second {
			// The client failed at once: do not spin on a backend that is
			// closed for good.
			retry.Sleep(ctx, wait.Next(), s.opts.Fatal)
		}
	}
	return nil
}

func (s *Server) fatal() error {
	if s.opts.Fatal == nil {
		return nil
	}
	select {
	case <-s.opts.Fatal:
		if s.opts.FatalErr != nil {
			if err := s.opts.FatalErr(); err != nil {
				return err
			}
		}
		return fmt.Errorf("%w: the metadata backend is gone", core.ErrUnavailable)
	default:
		return nil
	}
}

// withClient observes the leader and campaigns with client b until b is
// closed under it or ctx ends.
func (s *Server) withClient(ctx context.Context, b core.MetadataBackend) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.observeLeader(cctx, b)
	// The metadata image is kept current while this coordinator is a
	// standby too (a warm standby): winning an election then costs the
	// tail of changes it has not applied yet, not a load of the tree.
	img := image.New(image.Options{Prefix: "/", Logf: func(f string, a ...any) { s.log.Warn(fmt.Sprintf(f, a...)) },
		OnChange: s.imageChanged})
	imgDone := make(chan struct{})
	go func() { defer close(imgDone); img.Run(cctx, b) }()
	defer func() { cancel(); <-imgDone }()
	s.warmImage.Store(img)
	defer s.warmImage.Store(nil)
	// The bucket states follow the image from now on too, kept current by
	// keepBucketsWarm while this coordinator campaigns, by the
	// controller's rounds while it leads.
	buckets := newBucketStates()
	s.bucketsSink.Store(buckets)
	defer s.bucketsSink.Store(nil)
	failures := 0
	wait := retry.New(200*time.Millisecond, 2*time.Second)
	for cctx.Err() == nil {
		if s.fatal() != nil {
			return
		}
		if !s.waitMigrationUnfenced(cctx, b) {
			return
		}
		warmCtx, warmStop := context.WithCancel(cctx)
		warmDone := make(chan struct{})
		go func() { defer close(warmDone); s.keepBucketsWarm(warmCtx, b, img, buckets) }()
		lead, err := b.Campaign(cctx, core.Candidate{ID: s.id, Address: s.addr})
		warmStop()
		<-warmDone
		if err != nil {
			if cctx.Err() != nil {
				return
			}
			if errors.Is(err, core.ErrClosed) {
				s.log.Warn("backend client closed; opening a new one", "err", err)
				return
			}
			failures++
			s.log.Warn("campaign failed; retrying", "err", err, "failures", failures)
			if failures >= 5 {
				return
			}
			retry.Sleep(cctx, wait.Next(), s.opts.Fatal)
			continue
		}
		failures = 0
		wait.Reset()
		s.lead(cctx, b, lead, img, buckets)
	}
}

// keepBucketsWarm keeps a standby's bucket states current with its image,
// as the controller's rounds do on the leader (paced as they are), so that
// a new leader's first round reads what changed since, not every
// LeaderAndIsr record. It returns when ctx ends.
func (s *Server) keepBucketsWarm(ctx context.Context, b core.MetadataBackend, img *image.Image, buckets *bucketStates) {
	if img.WaitReady(ctx) != nil {
		return
	}
	cat := catalog.New(b, catalog.Options{Reader: img}) // for its decode cache only
	for {
		start := time.Now()
		err := buckets.refresh(ctx, cat, img)
		if err == nil {
			buckets.perServer()
		}
		build := time.Since(start)
		if err == nil {
			select {
			case <-ctx.Done():
				return
			case <-buckets.wake:
			}
		}
		t := time.NewTimer(min(max(notifyDebounce, notifyPacing*build), notifyMaxPause))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// catchUp brings img, the warm image, up to the leadership's start: once
// it has loaded (at the client's first start; a warm standby's has long
// before), the leader creates its marker, the ephemeral
// /metaplane-leaders/<epoch> (fenced), and waits until the image has
// applied it from the change stream: then it holds every change made
// before this leadership, whatever the backend, without reading the tree.
func (s *Server) catchUp(ctx context.Context, b core.MetadataBackend, img *image.Image, lead core.Leadership) error {
	if err := img.WaitReady(ctx); err != nil {
		return err
	}
	p := catalog.LeaderMarkerPath(lead.Epoch())
	res, err := b.Txn(ctx, []core.Op{core.CreateOp(p, []byte(s.id), core.Ephemeral).WithParents()}, core.TxnOptions{Fence: lead.Fence()})
	rev := res.Revision
	if errors.Is(err, core.ErrNodeExists) {
		// Ours, from an attempt whose answer was lost.
		n, gerr := core.Get(ctx, b, p)
		if gerr != nil {
			return gerr
		}
		rev, err = n.Stat.CreateRevision, nil
	}
	if err != nil {
		return fmt.Errorf("leader marker %s: %w", p, err)
	}
	return img.WaitRevision(ctx, rev)
}

// imageChanged passes the paths the image changed to the client's bucket
// states (kept current on a standby too).
func (s *Server) imageChanged(paths []string) {
	if b := s.bucketsSink.Load(); b != nil {
		b.onChange(paths)
	}
}

// lead serves as leader until the leadership is lost or ctx ends. img is
// the client's image, kept current since the client opened.
func (s *Server) lead(ctx context.Context, b core.MetadataBackend, lead core.Leadership, img *image.Image, buckets *bucketStates) {
	s.log.Info("elected leader", "epoch", lead.Epoch())
	elected := time.Now()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()

	wctx, wcancel := context.WithTimeout(lctx, s.opts.ImageLoadTimeout)
	go func() {
		select {
		case <-lead.Lost():
			wcancel()
		case <-wctx.Done():
		}
	}()
	err := s.catchUp(wctx, b, img, lead)
	wcancel()
	if err != nil {
		s.log.Warn("leader could not bring the metadata image up to date; resigning", "err", err)
		rctx, rc := context.WithTimeout(context.Background(), 5*time.Second)
		lead.Resign(rctx)
		rc()
		return
	}
	caughtUp := time.Since(elected)
	s.metrics.imageCatchUp.Observe(caughtUp.Seconds())
	defer func() {
		// The marker goes with the leadership (best effort: else with the
		// client's session).
		dctx, dc := context.WithTimeout(context.Background(), 2*time.Second)
		core.Delete(dctx, b, catalog.LeaderMarkerPath(lead.Epoch()), core.AnyVersion, core.Fence{})
		dc()
	}()
	if fencedByMigration(lctx, img, core.ReadOptions{}) {
		s.log.Warn("elected on a store that carries the migration fence: resigning before serving", "fence", catalog.MigrationFencePath)
		rctx, rc := context.WithTimeout(context.Background(), 5*time.Second)
		lead.Resign(rctx)
		rc()
		return
	}
	fenceDone := make(chan struct{})
	go func() { defer close(fenceDone); s.resignOnMigrationFence(lctx, img, lead) }()
	defer func() { cancel(); <-fenceDone }()
	cat := catalog.New(b, catalog.Options{
		Fence: lead.Fence(), Epoch: lead.Epoch(), Reader: img, OnWrite: img.ApplyWrite,
		IDBlockSize: s.opts.IDBlockSize, DefaultReplicationFactor: s.opts.DefaultReplicationFactor,
		MaxBucketNum: s.opts.MaxBucketNum, MaxPartitionNum: s.opts.MaxPartitionNum,
	})
	st := &leaderState{lead: lead, b: b, cat: cat, img: img, buckets: buckets, ctl: newController(), started: time.Now()}
	s.setLeader(st)
	s.leaderInfo.Store(&core.LeaderInfo{ID: s.id, Address: s.addr, Epoch: lead.Epoch()})
	s.log.Info("serving as leader", "epoch", lead.Epoch(), "address", s.addr, "caught_up_in", caughtUp.Round(time.Microsecond),
		"image_nodes", img.Len())
	notifyDone := make(chan struct{})
	go func() { defer close(notifyDone); s.controlLoop(lctx, st) }()
	defer func() { cancel(); <-notifyDone }()
	cleanDone := make(chan struct{})
	go func() { defer close(cleanDone); s.cleanRequests(lctx, st) }()
	defer func() { cancel(); <-cleanDone }()
	select {
	case <-lead.Lost():
		s.setLeader(nil)
		s.log.Warn("leadership lost; serving as standby", "epoch", lead.Epoch())
	case <-ctx.Done():
		s.setLeader(nil)
		s.log.Info("resigning leadership at shutdown", "epoch", lead.Epoch())
		rctx, rc := context.WithTimeout(context.Background(), 5*time.Second)
		if err := lead.Resign(rctx); err != nil {
			// At shutdown the plugin may be gone already (a terminal's
			// Ctrl-C reaches it too): the leadership ends with it.
			s.log.Info("resign at shutdown did not complete; the leadership ends with the backend session", "err", err)
		} else {
			s.log.Info("leadership resigned", "epoch", lead.Epoch())
		}
		rc()
	}
}

func (s *Server) observeLeader(ctx context.Context, b core.MetadataBackend) {
	for ctx.Err() == nil {
		ch, err := b.ObserveLeader(ctx)
		if err != nil {
			if errors.Is(err, core.ErrClosed) {
				return
			}
			retry.Sleep(ctx, 500*time.Millisecond)
			continue
		}
		for li := range ch {
			li := li
			prev := s.leaderInfo.Swap(&li)
			s.metrics.observedLeader(prev, li)
			s.metrics.observedEpoch.Set(float64(li.Epoch))
			s.logLeader(prev, li)
		}
		retry.Sleep(ctx, 200*time.Millisecond)
	}
}

// logLeader logs a change of leader that this coordinator observed (its
// own election is logged by lead).
func (s *Server) logLeader(prev *core.LeaderInfo, li core.LeaderInfo) {
	if prev != nil && prev.ID == li.ID && prev.Epoch == li.Epoch {
		return
	}
	switch {
	case li.ID == s.id:
	case li.ID == "":
		s.log.Info("no leader", "epoch", li.Epoch)
	default:
		s.log.Info("new leader", "leader", li.ID, "leader_address", li.Address, "epoch", li.Epoch)
	}
}

// currentLeader returns the leader as last observed, asking the backend
// when none has been observed yet.
func (s *Server) currentLeader() core.LeaderInfo {
	if l := s.leaderInfo.Load(); l != nil && l.ID != "" {
		return *l
	}
	if ref := s.backend.Load(); ref != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if li, err := ref.b.Leader(ctx); err == nil && li.ID != "" {
			s.leaderInfo.CompareAndSwap(nil, &li)
			return li
		} else if err != nil {
			s.log.Debug("no leader observed and the backend's Leader failed", "err", err)
		}
	}
	return core.LeaderInfo{Epoch: -1}
}

// serving returns the leader state, or a NOT_LEADER status naming the
// leader.
func (s *Server) serving() (*leaderState, error) {
	l := s.leader.Load()
	if l != nil && !l.lost() {
		return l, nil
	}
	return nil, s.notLeader(s.currentLeader())
}

// unaryErrors and streamErrors give every handler's error its status
// (errorStatus), so that a handler returns its errors as they are.
func (s *Server) unaryErrors(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	return resp, s.errorStatus(err)
}

func (s *Server) streamErrors(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return s.errorStatus(handler(srv, ss))
}

// errorStatus is the status of a handler's error: a backend's ErrNotLeader
// or ErrFenced (leadership lost under the call) becomes NOT_LEADER with
// the new leader's address; any other error gets its row of the admin
// wire's error table, and a status without one passes as it is
// (adminapi.ToStatus).
func (s *Server) errorStatus(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, core.ErrFenced) || (errors.Is(err, core.ErrNotLeader) && core.LeaderAddressOf(err) == "") {
		return adminapi.ToStatus(s.notLeader(s.currentLeader()))
	}
	return adminapi.ToStatus(err)
}
