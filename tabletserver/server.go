// Package tabletserver is the reference tablet server: an observer of the
// metadata that registers itself, keeps its registration alive, follows the
// metadata into a local view, and serves the coordinator-to-tablet requests
// with coordinator-epoch fencing (FIP-9): a request from a lower epoch than
// the highest it has seen is refused (INVALID_COORDINATOR), a higher epoch
// is adopted.
//
// On the Raft backend it never joins the quorum: it finds the coordinator
// leader through the seed coordinators and calls RegisterTabletServer and
// TabletServerHeartbeat there, and FetchMetadataSnapshot and FetchMetadata
// on a coordinator other than the leader (Options.MetadataStream,
// MetadataSource). On the
// ZooKeeper backend it has its own ZooKeeper session and ephemeral
// /tabletservers/ids/<id>, re-created after a session expiry.
package tabletserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/image"
	"github.com/metaplane/metaplane/internal/authn"
	"github.com/metaplane/metaplane/internal/retry"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// Options configure a Server.
type Options struct {
	// ID is the tablet server's id (tablet-server.id), at least 0.
	ID int32
	// Listener serves the TabletService. Required; closed by Serve.
	Listener net.Listener
	// Credentials, when set, secure Listener (TLS: credentials.NewTLS, the
	// protocol of the client listener in security.protocol.map); nil
	// serves plaintext. The caller builds them; the server reads no file.
	Credentials credentials.TransportCredentials
	// Security authenticates and authorizes the calls on Listener (the
	// coordinator leader's NotifyLeaderAndIsr, GetTabletServerState); the
	// zero value checks nothing.
	Security Security
	// Listeners is the advertised registration value
	// ("CLIENT://host:port"); default CLIENT://<Listener's address>.
	Listeners string
	// Rack, CPUCores and MemoryBytes go into the registration.
	Rack        string
	CPUCores    float64
	MemoryBytes int64

	// Seeds are the coordinators' client addresses, for a backend whose
	// tablet servers follow it through the coordinator
	// (core.TabletServersThroughCoordinator, e.g. Raft:
	// coordinator.seed.nodes). Exactly one of Seeds and Open is set.
	Seeds []string
	// TLS, with Seeds, is the TLS configuration the tablet server dials the
	// coordinators with (their CLIENT listener is mapped to SSL): RootCAs
	// to verify them, and its own client certificate. Nil: plaintext.
	TLS *tls.Config
	// Username and Password, with Seeds and TLS, authenticate the tablet
	// server to a SASL_SSL listener (client.security.sasl.*): its
	// principal is User:<Username>.
	Username, Password string
	// Open opens the tablet server's own backend client, for a backend
	// whose tablet servers follow it directly (core.TabletServersDirect,
	// e.g. ZooKeeper).
	Open func(ctx context.Context) (core.MetadataBackend, error)
	// BackendName is the backend's name, for status only (with Seeds; with
	// Open the client's capabilities name it).
	BackendName string
	// CoordinatorRefresh, with Seeds, is how often the server asks the
	// coordinators which coordinators they know (GetLeader's
	// coordinators, filled by their gossip) and adds them to its seeds, so
	// that it keeps following the metadata when every seed is gone;
	// default 5s.
	CoordinatorRefresh time.Duration

	// MetadataStream, with Seeds, is where the metadata stream is fetched
	// from (tablet-server.metadata-stream.source): StreamFromAny (default:
	// spread over the coordinators) or StreamFromLeader.
	MetadataStream string

	// ShutdownTimeout bounds what a stopping server does before it goes:
	// the controlled shutdown (its leaderships move to other ISR members)
	// and its deregistration; default 15s.
	ShutdownTimeout time.Duration

	// HeartbeatInterval is the Raft-mode heartbeat period; default a third
	// of the session timeout the coordinator grants.
	HeartbeatInterval time.Duration
	// Logger receives the server's events; default slog.Default().
	Logger *slog.Logger
}

// Security is how the tablet service authenticates and authorizes its
// callers (docs/security.md): the same principals as the coordinator's
// client listener (authn.Authenticate). With Authorize, only the
// principals of Allowed may call it.
type Security struct {
	// Passwords, when set, makes the listener SASL_SSL: every call must
	// carry a username and password that Passwords accepts.
	Passwords *authn.Passwords
	// Authorize, authorizer.enabled: refuse every call whose principal is
	// not one of Allowed (PERMISSION_DENIED).
	Authorize bool
	// Allowed, super.users: the principals allowed to call the tablet
	// service when Authorize is on (the coordinators' principal belongs
	// there).
	Allowed []config.Principal
}

func (s Security) active() bool { return s.Passwords != nil || s.Authorize }

// Server is a tablet server. Build it with New, run it with Serve.
type Server struct {
	opts Options
	log  *slog.Logger
	grpc *grpc.Server
	img  *image.Image

	epoch      atomic.Int64 // highest coordinator epoch seen; -1 before any
	notified   atomic.Int64 // epoch of the last NotifyLeaderAndIsr accepted; -1 before any
	registered atomic.Bool
	lease      atomic.Int64

	mu      sync.Mutex
	buckets map[bucketKey]*adminv1.NotifyLeaderAndIsrRequest_BucketState
	lagging map[int32]bool // replicas SetReplicaLag marked lagging
	isrWake chan struct{}
	backend atomic.Pointer[string]
	client  atomic.Pointer[adminclient.Client] // with Seeds, while serving
	// direct is the backend client with Open, while open.
	direct atomic.Pointer[core.MetadataBackend]
	// leaderClient reaches the coordinator leader with Open (see
	// callCoordinator).
	leaderMu     sync.Mutex
	leaderClient *adminclient.Client
	leaderAddr   string
}

type bucketKey struct {
	table, partition int64
	bucket           int32
}

// New returns a tablet server. Errors: a bad id, a missing Listener, or
// not exactly one of Seeds and Open.
func New(opts Options) (*Server, error) {
	if opts.ID < 0 {
		return nil, fmt.Errorf("%w: tablet server id %d: must be at least 0 (tablet-server.id / --id)", core.ErrInvalidArgument, opts.ID)
	}
	if opts.Listener == nil {
		return nil, fmt.Errorf("%w: tablet server: Listener is required", core.ErrInvalidArgument)
	}
	if (len(opts.Seeds) == 0) == (opts.Open == nil) {
		return nil, fmt.Errorf("%w: tablet server: give either coordinator seeds (Raft) or a backend (ZooKeeper)", core.ErrInvalidArgument)
	}
	if opts.Listeners == "" {
		opts.Listeners = "CLIENT://" + opts.Listener.Addr().String()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if _, err := NewMetadataSource(nil, SourceOptions{From: opts.MetadataStream}); err != nil {
		return nil, err
	}
	if opts.CoordinatorRefresh <= 0 {
		opts.CoordinatorRefresh = 5 * time.Second
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 15 * time.Second
	}
	s := &Server{opts: opts, log: opts.Logger.With("tablet-server", opts.ID),
		buckets: map[bucketKey]*adminv1.NotifyLeaderAndIsrRequest_BucketState{}, lagging: map[int32]bool{},
		isrWake: make(chan struct{}, 1)}
	s.epoch.Store(-1)
	s.notified.Store(-1)
	s.img = image.New(image.Options{Prefix: "/", Logf: func(f string, a ...any) { s.log.Debug(fmt.Sprintf(f, a...)) }})
	var sopts []grpc.ServerOption
	if opts.Credentials != nil {
		sopts = append(sopts, grpc.Creds(opts.Credentials))
	}
	sopts = append(sopts, grpc.ChainUnaryInterceptor(s.unaryAuth))
	s.grpc = grpc.NewServer(sopts...)
	adminv1.RegisterTabletServiceServer(s.grpc, &tabletService{s: s})
	return s, nil
}

// Epoch returns the highest coordinator epoch seen (-1 before any).
func (s *Server) Epoch() int64 { return s.epoch.Load() }

// Registered reports whether the server's registration is in place as far
// as it knows.
func (s *Server) Registered() bool { return s.registered.Load() }

// View is the server's local copy of the metadata.
func (s *Server) View() *image.Image { return s.img }

// Address returns the TabletService address (host:port).
func (s *Server) Address() string { return s.opts.Listener.Addr().String() }

// observeEpoch adopts epoch if it is higher than the highest seen and
// reports whether a request at epoch is acceptable.
func (s *Server) observeEpoch(epoch int64) bool {
	for {
		cur := s.epoch.Load()
		if epoch < cur {
			return false
		}
		if epoch == cur || s.epoch.CompareAndSwap(cur, epoch) {
			if epoch > cur {
				s.log.Info("adopted coordinator epoch", "epoch", epoch, "previous", cur)
			}
			return true
		}
	}
}

// Serve runs the server until ctx ends: the TabletService, registration and
// heartbeats (or the ZooKeeper session), and the metadata view. It returns
// nil when ctx ends, or the gRPC server's failure.
func (s *Server) Serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		if err := s.grpc.Serve(s.opts.Listener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- err
		}
	}()
	var wg sync.WaitGroup
	isrCtx, isrCancel := context.WithCancel(ctx)
	defer isrCancel()
	if len(s.opts.Seeds) > 0 {
		client, err := adminclient.NewClientWithOptions(s.opts.Seeds, adminclient.Options{TLS: s.opts.TLS, RefreshInterval: s.opts.CoordinatorRefresh,
			Username: s.opts.Username, Password: s.opts.Password})
		if err != nil {
			s.grpc.Stop()
			return err
		}
		defer client.Close()
		s.client.Store(client)
		defer s.client.Store(nil)
		name := s.opts.BackendName
		s.backend.Store(&name)
		src, _ := NewMetadataSource(client, SourceOptions{From: s.opts.MetadataStream, Spread: int(s.opts.ID), Logger: s.log}) // checked by New
		wg.Add(2)
		go func() { defer wg.Done(); s.registerLoop(ctx, client) }()
		go func() { defer wg.Done(); s.img.Run(ctx, src) }()
	} else {
		wg.Add(1)
		go func() { defer wg.Done(); s.zkLoop(ctx) }()
	}
	isrDone := make(chan struct{})
	go func() { defer close(isrDone); s.isrLoop(isrCtx) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	isrCancel()
	<-isrDone
	if len(s.opts.Seeds) > 0 && err == nil && s.lease.Load() != 0 {
		// Stopping (SIGTERM): hand the leaderships over and deregister
		// while the lease still holds (heartbeats have stopped: the
		// lease lasts its session timeout from the last one).
		s.stopGracefully(ctx)
	}
	cancel()
	s.grpc.Stop()
	wg.Wait()
	s.closeLeaderClient()
	return err
}

// registerTimeout bounds one registration call, redirects and retries
// included.
const registerTimeout = 10 * time.Second

// registerLoop registers through the coordinator leader and heartbeats,
// re-registering when the lease is gone.
func (s *Server) registerLoop(ctx context.Context, c *adminclient.Client) {
	wait := retry.New(100*time.Millisecond, 2*time.Second)
	for ctx.Err() == nil {
		var reg *adminv1.RegisterTabletServerResponse
		// The call as a whole (redirects and retries included) has its
		// own deadline, not the client's default.
		rctx, rcancel := context.WithTimeout(ctx, registerTimeout)
		err := c.Tablets(rctx, func(ctx context.Context, t adminv1.TabletServerServiceClient) error {
			var err error
			reg, err = t.RegisterTabletServer(ctx, &adminv1.RegisterTabletServerRequest{ServerId: s.opts.ID,
				Listeners: s.opts.Listeners, Rack: s.opts.Rack, CpuCores: s.opts.CPUCores, MemoryBytes: s.opts.MemoryBytes})
			return err
		})
		rcancel()
		if err != nil {
			d := wait.Next()
			if ctx.Err() == nil {
				s.log.Warn("registration failed; retrying", "err", err, "in", d)
			}
			retry.Sleep(ctx, d)
			continue
		}
		wait.Reset()
		s.observeEpoch(reg.CoordinatorEpoch)
		s.lease.Store(reg.LeaseId)
		s.registered.Store(true)
		s.log.Info("registered", "lease", reg.LeaseId, "coordinator_epoch", reg.CoordinatorEpoch)
		interval := s.opts.HeartbeatInterval
		if interval <= 0 {
			interval = time.Duration(reg.SessionTimeoutMs) * time.Millisecond / 3
		}
		if interval <= 0 {
			interval = time.Second
		}
		s.heartbeat(ctx, c, reg.LeaseId, interval, time.Duration(reg.SessionTimeoutMs)*time.Millisecond)
		s.registered.Store(false)
	}
}

// heartbeat renews the lease every interval until it is gone (or ctx
// ends).
func (s *Server) heartbeat(ctx context.Context, c *adminclient.Client, lease int64, interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var resp *adminv1.TabletServerHeartbeatResponse
		// One heartbeat, redirects and retries included, within one
		// interval: the next one is due then.
		hctx, hcancel := context.WithTimeout(ctx, interval)
		err := c.Tablets(hctx, func(ctx context.Context, ts adminv1.TabletServerServiceClient) error {
			var err error
			resp, err = ts.TabletServerHeartbeat(ctx, &adminv1.TabletServerHeartbeatRequest{ServerId: s.opts.ID, LeaseId: lease})
			return err
		})
		hcancel()
		switch {
		case err == nil:
			lastOK = time.Now()
			s.observeEpoch(resp.CoordinatorEpoch)
		case errors.Is(err, core.ErrSessionExpired):
			s.log.Warn("lease expired; registering again", "lease", lease)
			return
		case ctx.Err() != nil:
			return
		default:
			s.log.Warn("heartbeat failed", "err", err)
			if timeout > 0 && time.Since(lastOK) > timeout {
				s.log.Warn("no heartbeat within the session timeout; registering again")
				return
			}
		}
	}
}

// zkLoop keeps an own backend client, the ephemeral registration and the
// view, reopening the client when it is closed under it.
func (s *Server) zkLoop(ctx context.Context) {
	wait := retry.New(100*time.Millisecond, 5*time.Second)
	for ctx.Err() == nil {
		b, err := s.opts.Open(ctx)
		if err != nil {
			s.log.Warn("opening the backend failed; retrying", "err", err)
			retry.Sleep(ctx, wait.Next())
			continue
		}
		name := b.Capabilities().Name
		s.backend.Store(&name)
		s.direct.Store(&b)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); s.img.Run(cctx, b) }()
		s.keepRegistered(cctx, b)
		if ctx.Err() != nil && s.registered.Load() {
			// Stopping: hand the leaderships over while the session (and
			// the registration) holds; closing it then deregisters.
			s.stopGracefully(ctx)
		}
		cancel()
		<-done
		s.direct.Store(nil)
		b.Close()
		retry.Sleep(ctx, wait.Next())
	}
}

// keepRegistered (re)creates /tabletservers/ids/<id> in the client's own
// session: at start, after every session expiry, and whenever it is found
// missing.
func (s *Server) keepRegistered(ctx context.Context, b core.MetadataBackend) {
	events, err := b.SessionEvents(ctx)
	if err != nil {
		s.log.Warn("session events", "err", err)
		return
	}
	path := catalog.TabletServerPath(s.opts.ID)
	check := time.NewTicker(2 * time.Second)
	defer check.Stop()
	for ctx.Err() == nil {
		sess := b.Session()
		st, exists, err := core.Exists(ctx, b, path)
		s.log.Debug("registration check", "session", sess.ID, "exists", exists, "owner", st.EphemeralOwner, "err", err)
		switch {
		case err != nil:
			s.registered.Store(false)
		case exists && st.EphemeralOwner == sess.ID:
			if !s.registered.Swap(true) {
				s.log.Info("registered", "session", sess.ID)
			}
		case exists:
			// An earlier session's registration: it goes when that session
			// expires.
			s.registered.Store(false)
		default:
			reg := catalog.TabletServerRegistration{Listeners: s.opts.Listeners, RegisterTimestamp: time.Now().UnixMilli(),
				Rack: s.opts.Rack, CPUCores: s.opts.CPUCores, MemoryBytes: s.opts.MemoryBytes}
			_, _, err := core.Create(ctx, b, path, reg.Marshal(), core.CreateOptions{Mode: core.Ephemeral, MakeParents: true})
			if err == nil {
				s.registered.Store(true)
				s.log.Info("registered", "session", sess.ID)
				continue
			}
			s.log.Debug("registration failed", "err", err)
			if !errors.Is(err, core.ErrNodeExists) {
				s.log.Warn("registration failed", "err", err)
			}
			retry.Sleep(ctx, 100*time.Millisecond)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if ev.State == core.SessionExpired || ev.State == core.SessionSuspended {
				s.registered.Store(false)
				s.log.Warn("session event", "state", ev.State)
			}
			if ev.State == core.SessionClosed {
				return
			}
		case <-check.C:
		}
	}
}

// Tables returns the "db.table" names in the server's view.
func (s *Server) Tables(ctx context.Context) []string {
	var out []string
	dbs, _, err := s.img.Children(ctx, catalog.DatabasesPath, core.ReadOptions{})
	if err != nil {
		return out
	}
	for _, db := range dbs {
		tables, _, err := s.img.Children(ctx, catalog.TablesPath(db), core.ReadOptions{})
		if err != nil {
			continue
		}
		for _, t := range tables {
			out = append(out, db+"."+t)
		}
	}
	sort.Strings(out)
	return out
}

// bucketsLed counts the buckets whose LeaderAndIsr in the view names this
// server as leader.
func (s *Server) bucketsLed(ctx context.Context) int32 {
	var n int32
	snap, err := s.img.Snapshot(ctx, catalog.TabletServersRoot)
	if err != nil {
		return 0
	}
	for _, node := range snap.Nodes {
		if !strings.HasSuffix(node.Path, "/leader_isr") {
			continue
		}
		if l, err := catalog.UnmarshalLeaderAndIsr(node.Data); err == nil && l.Leader == s.opts.ID {
			n++
		}
	}
	return n
}

// tabletService implements adminv1.TabletServiceServer.
type tabletService struct {
	adminv1.UnimplementedTabletServiceServer
	s *Server
}

func (t *tabletService) NotifyLeaderAndIsr(ctx context.Context, r *adminv1.NotifyLeaderAndIsrRequest) (*adminv1.NotifyLeaderAndIsrResponse, error) {
	s := t.s
	if !s.observeEpoch(r.CoordinatorEpoch) {
		highest := s.epoch.Load()
		s.log.Warn("refused a request from a stale coordinator", "epoch", r.CoordinatorEpoch, "highest", highest, "coordinator", r.CoordinatorId)
		return nil, adminapi.ToStatus(&adminapi.InvalidCoordinatorError{Got: r.CoordinatorEpoch, Highest: highest})
	}
	s.setBuckets(r.Buckets)
	s.notified.Store(r.CoordinatorEpoch)
	return &adminv1.NotifyLeaderAndIsrResponse{CoordinatorEpoch: s.epoch.Load()}, nil
}

func (t *tabletService) GetTabletServerState(ctx context.Context, r *adminv1.GetTabletServerStateRequest) (*adminv1.GetTabletServerStateResponse, error) {
	s := t.s
	leading, following := s.bucketLists()
	return &adminv1.GetTabletServerStateResponse{ServerId: s.opts.ID, CoordinatorEpoch: s.epoch.Load(),
		Registered: s.registered.Load(), MetadataOffset: s.img.Revision(), Tables: s.Tables(ctx),
		BucketsLed: s.bucketsLed(ctx), Backend: s.backendName(), Coordinators: s.Coordinators(),
		NotifiedEpoch: s.notified.Load(), Leading: leading, Following: following}, nil
}

func (t *tabletService) SetReplicaLag(ctx context.Context, r *adminv1.SetReplicaLagRequest) (*adminv1.SetReplicaLagResponse, error) {
	t.s.SetReplicaLag(r.ReplicaId, r.Lagging)
	t.s.log.Info("replica lag set (test knob)", "replica", r.ReplicaId, "lagging", r.Lagging)
	return &adminv1.SetReplicaLagResponse{}, nil
}

// Coordinators returns the coordinator addresses the server knows (with
// Seeds: its seeds and those learned from the coordinators; nil on a
// backend it follows directly, or when not serving).
func (s *Server) Coordinators() []string {
	if c := s.client.Load(); c != nil {
		return c.Coordinators()
	}
	return nil
}

func (s *Server) backendName() string {
	if p := s.backend.Load(); p != nil {
		return *p
	}
	return ""
}

// unaryAuth authenticates every call on the tablet service and, with
// Security.Authorize, lets in only the principals of Security.Allowed,
// before the handler runs (a refused call has no effect).
func (s *Server) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	sec := s.opts.Security
	if !sec.active() || authn.IsHealth(info.FullMethod) {
		return handler(ctx, req)
	}
	p, host, err := authn.Authenticate(ctx, sec.Passwords)
	if err != nil {
		return nil, adminapi.ToStatus(err)
	}
	if sec.Authorize && !authn.Contains(sec.Allowed, p) {
		s.log.Warn("refused a tablet-service call", "principal", p.String(), "host", host, "method", info.FullMethod)
		return nil, adminapi.ToStatus(fmt.Errorf("%w: %s may not call %s on tablet server %d: only super.users may call the tablet service (docs/security.md)",
			adminapi.ErrPermissionDenied, p, info.FullMethod, s.opts.ID))
	}
	return handler(authn.WithPrincipal(ctx, p), req)
}
