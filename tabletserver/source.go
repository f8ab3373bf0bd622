package tabletserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/retry"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Where a tablet server fetches the metadata stream from
// (tablet-server.metadata-stream.source).
const (
	// StreamFromAny spreads the stream over the coordinators: each tablet
	// server fetches from one of the coordinators it knows other than the
	// leader (which has the writes, registrations and heartbeats to serve),
	// picked by its id modulo their number in their listed order; it passes
	// a coordinator that fails or is behind it over for a few seconds, and
	// fetches from the leader when no other coordinator answers. The
	// default.
	StreamFromAny = config.MetadataStreamFromAny
	// StreamFromLeader fetches from the coordinator leader only, following
	// its NOT_LEADER redirects (the behaviour before any-voter serving).
	StreamFromLeader = config.MetadataStreamFromLeader
)

// SourceOptions configure a MetadataSource.
type SourceOptions struct {
	// From is StreamFromAny (default when empty) or StreamFromLeader.
	From string
	// Spread picks the coordinator with From = StreamFromAny: the
	// Spread-th (modulo their number) of the coordinators it may fetch
	// from. The tablet server uses its id.
	Spread int
	// Logger receives retries at debug level; default slog.Default().
	Logger *slog.Logger
}

// MetadataSource feeds an image.Image (image.Run) from the coordinators'
// metadata stream: Snapshot is FetchMetadataSnapshot, Watch is a
// FetchMetadata long poll loop, Capabilities says the stream has exact
// history (offsets). Only those three methods are used by the image; the
// embedded nil interface makes every other method panic.
//
// Whichever coordinator answers, what it delivers never goes backwards:
// every fetch starts at the offset after the last one delivered, a
// coordinator never answers with an older next offset, and a snapshot is
// asked for with the highest offset delivered as its minimum (a
// coordinator behind it refuses, and the source asks the next one).
type MetadataSource struct {
	core.MetadataBackend
	c      *adminclient.Client
	log    *slog.Logger
	leader bool

	mu   sync.Mutex
	turn int // with StreamFromAny, the coordinator tried first: Coordinators()[turn % n]
	// leaderAddr is the coordinator that last answered as leader.
	leaderAddr string
	// failed holds the coordinators that failed, passed over until the
	// time given.
	failed map[string]time.Time
	// seen is the highest offset delivered (a snapshot's, or a fetch's
	// next offset - 1).
	seen atomic.Int64
}

// Capabilities: the metadata stream is a log of offsets (exact history:
// an offset it no longer keeps is ErrCompacted, and the image takes a new
// snapshot).
func (r *MetadataSource) Capabilities() core.Capabilities {
	return core.Capabilities{Name: "metadata-stream", ExactHistory: true}
}

// NewMetadataSource returns a source of the metadata stream through c.
// Errors: an unknown From.
func NewMetadataSource(c *adminclient.Client, o SourceOptions) (*MetadataSource, error) {
	switch o.From {
	case "", StreamFromAny, StreamFromLeader:
	default:
		return nil, fmt.Errorf("%w: tablet-server.metadata-stream.source %q: must be %q or %q",
			core.ErrInvalidArgument, o.From, StreamFromAny, StreamFromLeader)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Spread < 0 {
		o.Spread = -o.Spread
	}
	return &MetadataSource{c: c, log: o.Logger, leader: o.From == StreamFromLeader, turn: o.Spread,
		failed: map[string]time.Time{}}, nil
}

// failedFor is how long a coordinator that failed is passed over.
const failedFor = 5 * time.Second

// Current returns the coordinator the next fetch goes to (with
// StreamFromLeader: the last known leader, "" before any call).
func (r *MetadataSource) Current() string {
	if r.leader {
		return r.c.Leader()
	}
	return r.current()
}

// Offset returns the highest offset the source has delivered.
func (r *MetadataSource) Offset() int64 { return r.seen.Load() }

// current returns the coordinator address to fetch from next: the
// turn's (modulo their number) of the coordinators that neither failed
// lately nor are the leader; else of those that did not fail lately; else
// of all.
func (r *MetadataSource) current() string {
	addrs := r.c.Coordinators()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	var up, followers []string
	for _, a := range addrs {
		if until, ok := r.failed[a]; ok && now.Before(until) {
			continue
		}
		up = append(up, a)
		if a != r.leaderAddr {
			followers = append(followers, a)
		}
	}
	switch {
	case len(followers) > 0:
		return followers[r.turn%len(followers)]
	case len(up) > 0:
		return up[r.turn%len(up)]
	}
	return addrs[r.turn%len(addrs)]
}

// moveOn makes the next fetches go to another coordinator than addr,
// which failed or is behind: it is passed over for a while.
func (r *MetadataSource) moveOn(addr string) {
	addrs := r.c.Coordinators()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed[addr] = time.Now().Add(failedFor)
	if len(r.failed) >= len(addrs) {
		// Every coordinator failed lately: try them in turn again.
		clear(r.failed)
		r.turn++
	}
}

// answered notes that addr answered, as leader or not.
func (r *MetadataSource) answered(addr string, leader bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.failed, addr)
	switch {
	case leader:
		r.leaderAddr = addr
	case r.leaderAddr == addr:
		r.leaderAddr = ""
	}
}

// call runs one stream RPC: on the leader (StreamFromLeader), else on the
// current coordinator; a coordinator that serves the stream only as
// leader (it answers NOT_LEADER) is passed over for the leader.
func (r *MetadataSource) call(ctx context.Context, rpc func(ctx context.Context, t adminv1.TabletServerServiceClient) error) (string, error) {
	if r.leader {
		return "", r.c.Tablets(ctx, rpc)
	}
	addr := r.current()
	err := r.c.TabletsAt(ctx, addr, rpc)
	if err != nil && errors.Is(err, core.ErrNotLeader) && ctx.Err() == nil {
		return "", r.c.Tablets(ctx, rpc)
	}
	if err != nil && ctx.Err() == nil {
		r.moveOn(addr)
	}
	return addr, err
}

// Snapshot is FetchMetadataSnapshotStream (FetchMetadataSnapshot from a
// coordinator that does not serve it), no older than what was delivered.
func (r *MetadataSource) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	var resp *adminv1.FetchMetadataSnapshotResponse
	min := r.seen.Load()
	var err error
	for attempt := 0; ; attempt++ {
		_, err = r.call(ctx, func(ctx context.Context, t adminv1.TabletServerServiceClient) error {
			var err error
			resp, err = fetchSnapshot(ctx, t, min)
			return err
		})
		if err == nil && resp.Offset < min {
			err = fmt.Errorf("%w: snapshot at offset %d, behind the %d delivered", core.ErrUnavailable, resp.Offset, min)
		}
		if err == nil || r.leader || attempt >= 2*len(r.c.Coordinators()) || ctx.Err() != nil {
			break
		}
		r.log.Debug("metadata snapshot failed; asking the next coordinator", "err", err)
		retry.Sleep(ctx, time.Duration(attempt)*50*time.Millisecond)
	}
	if err != nil {
		return core.Snapshot{}, err
	}
	snap := core.Snapshot{Revision: resp.Offset}
	for _, n := range resp.Nodes {
		if !core.HasPrefixPath(n.Path, prefix) {
			continue
		}
		snap.Nodes = append(snap.Nodes, core.Node{Path: n.Path, Data: n.Data, Stat: core.Stat{Version: n.Version,
			CreateRevision: n.CreateOffset, ModifyRevision: n.ModifyOffset, EphemeralOwner: n.EphemeralOwner, DataLength: int32(len(n.Data))}})
	}
	r.raise(resp.Offset)
	return snap, nil
}

// fetchSnapshot takes the snapshot in parts over
// FetchMetadataSnapshotStream, so that no message grows with the tree,
// and asks FetchMetadataSnapshot in one message when the coordinator does
// not serve the stream. The parts are one snapshot: a part with another
// offset, or a stream that does not end cleanly, fails the whole.
func fetchSnapshot(ctx context.Context, t adminv1.TabletServerServiceClient, min int64) (*adminv1.FetchMetadataSnapshotResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := t.FetchMetadataSnapshotStream(ctx, &adminv1.FetchMetadataSnapshotRequest{MinOffset: min})
	var whole *adminv1.FetchMetadataSnapshotResponse
	for err == nil {
		var part *adminv1.FetchMetadataSnapshotResponse
		part, err = st.Recv()
		switch {
		case errors.Is(err, io.EOF):
			if whole == nil {
				return nil, fmt.Errorf("%w: the metadata snapshot stream ended without a part", core.ErrUnavailable)
			}
			return whole, nil
		case err != nil:
		case whole == nil:
			whole = part
		case part.Offset != whole.Offset:
			return nil, fmt.Errorf("%w: the metadata snapshot stream changed offset from %d to %d", core.ErrUnavailable, whole.Offset, part.Offset)
		default:
			whole.Nodes = append(whole.Nodes, part.Nodes...)
		}
	}
	if status.Code(err) == codes.Unimplemented {
		return t.FetchMetadataSnapshot(ctx, &adminv1.FetchMetadataSnapshotRequest{MinOffset: min})
	}
	return nil, err
}

func (r *MetadataSource) raise(off int64) {
	for {
		cur := r.seen.Load()
		if off <= cur || r.seen.CompareAndSwap(cur, off) {
			return
		}
	}
}

// Watch follows the stream from offset from, long-polling.
func (r *MetadataSource) Watch(ctx context.Context, prefix string, from int64) (<-chan core.WatchResponse, error) {
	ch := make(chan core.WatchResponse, 1)
	go func() {
		defer close(ch)
		failures := 0
		fs := &fetchStream{r: r}
		defer fs.close()
		for ctx.Err() == nil {
			resp, addr, err := fs.fetch(ctx, from)
			if err == nil && resp.NextOffset < from {
				// A coordinator must not send us back; pass it over.
				err = fmt.Errorf("%w: coordinator %s answered next offset %d below %d", core.ErrUnavailable, addr, resp.NextOffset, from)
				r.moveOn(addr)
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				failures++
				// Every coordinator gets its chance before the image is told.
				limit := 5
				if !r.leader {
					limit = max(limit, 2*len(r.c.Coordinators()))
				}
				if errors.Is(err, core.ErrCompacted) || failures > limit {
					send(ctx, ch, core.WatchResponse{Err: fmt.Errorf("fetch metadata from %d: %w", from, err)})
					return
				}
				r.log.Debug("fetch metadata failed; retrying", "err", err, "coordinator", addr)
				retry.Sleep(ctx, time.Duration(failures-1)*100*time.Millisecond)
				continue
			}
			failures = 0
			if addr != "" {
				r.answered(addr, resp.Leader)
			}
			if len(resp.Records) == 0 && resp.NextOffset <= from {
				if addr != "" && resp.AppliedOffset < from-1 {
					// This coordinator is behind us: fetch elsewhere.
					r.log.Debug("coordinator behind the tablet server; moving on", "coordinator", addr,
						"applied", resp.AppliedOffset, "from", from)
					r.moveOn(addr)
				}
				continue // the long poll ended empty
			}
			wr := core.WatchResponse{Revision: resp.NextOffset - 1}
			for _, rec := range resp.Records {
				if !core.HasPrefixPath(rec.Path, prefix) || rec.Offset < from {
					continue
				}
				wr.Events = append(wr.Events, core.WatchEvent{Type: core.EventType(rec.Type), Path: rec.Path, Data: rec.Data,
					Revision: rec.Offset, Stat: core.Stat{Version: rec.Version, ModifyRevision: rec.Offset, DataLength: int32(len(rec.Data))}})
			}
			if !send(ctx, ch, wr) {
				return
			}
			from = resp.NextOffset
			r.raise(from - 1)
		}
	}()
	return ch, nil
}

// fetchTimeout bounds one fetch (the coordinator answers within its
// coordinator.metadata-stream.max-wait).
const fetchTimeout = 30 * time.Second

// leaderLookup bounds the question, with StreamFromLeader, of who leads.
const leaderLookup = 2 * time.Second

// fetchStream is a Watch's way of fetching: over one FetchMetadataStream
// to the coordinator it fetches from (one request, one response, in
// turn), and with a FetchMetadata call (its redirects, and passing a
// failing coordinator over) whenever the stream cannot serve a fetch:
// none open yet and it cannot be opened, it failed (closed: the next
// fetch opens a new one), or the fetch goes to another coordinator.
type fetchStream struct {
	r      *MetadataSource
	st     adminv1.TabletServerService_FetchMetadataStreamClient
	addr   string
	cancel context.CancelFunc
	// leaderAddr is, with StreamFromLeader, the leader the coordinators
	// named ("": ask before the next fetch).
	leaderAddr string
	// unary: a coordinator answered that it has no FetchMetadataStream
	// (an older version): calls from then on.
	unary bool
}

// fetch fetches from offset from, returning the response and the
// coordinator that answered ("" when found through the leader redirects).
func (fs *fetchStream) fetch(ctx context.Context, from int64) (*adminv1.FetchMetadataResponse, string, error) {
	req := &adminv1.FetchMetadataRequest{FromOffset: from}
	if resp, addr, ok := fs.streamed(ctx, req); ok {
		return resp, addr, nil
	}
	var resp *adminv1.FetchMetadataResponse
	addr, err := fs.r.call(ctx, func(ctx context.Context, t adminv1.TabletServerServiceClient) error {
		cctx, cancel := context.WithTimeout(ctx, fetchTimeout)
		defer cancel()
		var err error
		resp, err = t.FetchMetadata(cctx, req)
		return err
	})
	return resp, addr, err
}

// streamed serves req over the stream, opening it when needed; false when
// it could not (the caller then makes a call).
func (fs *fetchStream) streamed(ctx context.Context, req *adminv1.FetchMetadataRequest) (*adminv1.FetchMetadataResponse, string, bool) {
	if fs.unary {
		return nil, "", false
	}
	addr := fs.r.current()
	if fs.r.leader {
		if fs.leaderAddr == "" {
			// Every coordinator serves fetches, so an answer does not
			// say who leads: ask.
			gctx, cancel := context.WithTimeout(ctx, leaderLookup)
			gl, err := fs.r.c.GetLeader(gctx)
			cancel()
			if err != nil || gl.LeaderAddress == "" {
				return nil, "", false
			}
			fs.leaderAddr = gl.LeaderAddress
		}
		addr = fs.leaderAddr
	}
	if fs.st != nil && fs.addr != addr {
		fs.close()
	}
	if fs.st == nil {
		sctx, cancel := context.WithCancel(ctx)
		var st adminv1.TabletServerService_FetchMetadataStreamClient
		err := fs.r.c.TabletsAt(sctx, addr, func(_ context.Context, t adminv1.TabletServerServiceClient) error {
			var err error
			st, err = t.FetchMetadataStream(sctx)
			return err
		})
		if err != nil {
			cancel()
			return nil, "", false
		}
		fs.st, fs.addr, fs.cancel = st, addr, cancel
	}
	timer := time.AfterFunc(fetchTimeout, fs.cancel)
	err := fs.st.Send(req)
	var resp *adminv1.FetchMetadataResponse
	if err == nil {
		resp, err = fs.st.Recv()
	}
	timer.Stop()
	if err != nil {
		fs.leaderAddr = ""
		if status.Code(err) == codes.Unimplemented {
			fs.unary = true
			fs.r.log.Debug("coordinator has no FetchMetadataStream; fetching with calls", "coordinator", addr)
		}
		fs.close()
		return nil, "", false
	}
	if fs.r.leader {
		if !resp.Leader {
			fs.close() // no longer the leader: the next fetch asks again
			fs.leaderAddr = ""
		}
		addr = ""
	}
	return resp, addr, true
}

func (fs *fetchStream) close() {
	if fs.st != nil {
		fs.cancel()
		fs.st, fs.addr, fs.cancel = nil, "", nil
	}
}

func send(ctx context.Context, ch chan<- core.WatchResponse, r core.WatchResponse) bool {
	select {
	case ch <- r:
		return true
	case <-ctx.Done():
		return false
	}
}
