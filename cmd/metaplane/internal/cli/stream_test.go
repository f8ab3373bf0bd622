package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
	"github.com/metaplane/metaplane/tabletserver"
)

// TestMetadataStreamFromFollowers runs three coordinator processes on the
// Raft backend: a follower serves FETCH_METADATA and
// FETCH_METADATA_SNAPSHOT from its own applied log with the leader's
// changes, and refuses registration and heartbeats with NOT_LEADER naming
// the leader; a tablet server's metadata source that loses its coordinator
// moves to another and never goes backwards; a coordinator never answers
// below what the caller has (an offset ahead of it gets an empty answer
// that says how far it has applied; a snapshot older than min_offset is
// refused as retryable).
func TestMetadataStreamFromFollowers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real coordinator processes")
	}
	ps := startRaftCoordinators(t, 3)
	var addrs []string
	for _, p := range ps {
		addrs = append(addrs, p.client)
	}
	admin, err := adminclient.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createDB := func(name string) {
		t.Helper()
		if err := admin.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: name})
			return err
		}); err != nil {
			t.Fatalf("create database %s: %v", name, err)
		}
	}
	createDB("first") // the cluster serves
	var leader string
	testutil.WaitFor(t, 30*time.Second, "a serving leader", func() bool {
		r, err := admin.GetLeader(ctx)
		if err != nil || r.LeaderAddress == "" {
			return false
		}
		self, err := admin.GetLeaderFrom(ctx, r.LeaderAddress)
		leader = adminapi.HostPort(r.LeaderAddress)
		return err == nil && self.IsLeader
	})
	var followers []*raftProc
	for _, p := range ps {
		if p.client != leader {
			followers = append(followers, p)
		}
	}
	if len(followers) != 2 {
		t.Fatalf("leader %s is not one of %v", leader, addrs)
	}
	at := func(addr string, call func(ctx context.Context, t adminv1.TabletServerServiceClient) error) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return admin.TabletsAt(cctx, addr, call)
	}

	// A follower's snapshot and stream carry the leader's changes.
	f := followers[0].client
	var snap *adminv1.FetchMetadataSnapshotResponse
	testutil.WaitFor(t, 30*time.Second, "the follower's snapshot holds database first", func() bool {
		err := at(f, func(ctx context.Context, c adminv1.TabletServerServiceClient) (err error) {
			snap, err = c.FetchMetadataSnapshot(ctx, &adminv1.FetchMetadataSnapshotRequest{})
			return err
		})
		if err != nil {
			return false
		}
		for _, n := range snap.Nodes {
			if n.Path == "/metadata/databases/first" {
				return true
			}
		}
		return false
	})
	createDB("second")
	from := snap.Offset + 1
	var got *adminv1.FetchMetadataResponse
	testutil.WaitFor(t, 30*time.Second, "the follower streams database second", func() bool {
		var r *adminv1.FetchMetadataResponse
		if err := at(f, func(ctx context.Context, c adminv1.TabletServerServiceClient) (err error) {
			r, err = c.FetchMetadata(ctx, &adminv1.FetchMetadataRequest{FromOffset: from})
			return err
		}); err != nil {
			t.Fatalf("fetch metadata from follower %s: %v", f, err)
		}
		if r.NextOffset < from {
			t.Fatalf("follower answered next offset %d below the requested %d", r.NextOffset, from)
		}
		for _, rec := range r.Records {
			if rec.Offset < from {
				t.Fatalf("follower sent record %s at offset %d, below the requested %d", rec.Path, rec.Offset, from)
			}
			if rec.Path == "/metadata/databases/second" && rec.Type == adminv1.MetadataRecord_CREATED {
				got = r
				return true
			}
		}
		from = r.NextOffset
		return false
	})
	if got.Leader || got.AppliedOffset < got.NextOffset-1 {
		t.Fatalf("follower's answer: leader=%v applied %d next %d; want leader=false, applied >= next-1", got.Leader, got.AppliedOffset, got.NextOffset)
	}

	// Registration and heartbeats stay on the leader.
	err = at(f, func(ctx context.Context, c adminv1.TabletServerServiceClient) error {
		_, err := c.RegisterTabletServer(ctx, &adminv1.RegisterTabletServerRequest{ServerId: 7, Listeners: "CLIENT://127.0.0.1:1"})
		return err
	})
	if addr, ok := notLeaderAt(err); !ok || addr != leader {
		t.Fatalf("register on follower %s: %v; want NOT_LEADER naming %s", f, err, leader)
	}
	err = at(f, func(ctx context.Context, c adminv1.TabletServerServiceClient) error {
		_, err := c.TabletServerHeartbeat(ctx, &adminv1.TabletServerHeartbeatRequest{ServerId: 7, LeaseId: 1})
		return err
	})
	if addr, ok := notLeaderAt(err); !ok || addr != leader {
		t.Fatalf("heartbeat on follower %s: %v; want NOT_LEADER naming %s", f, err, leader)
	}

	// A tablet server's source follows a follower, loses it, and moves on
	// without going backwards.
	tsClient, err := adminclient.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer tsClient.Close()
	src, err := tabletserver.NewMetadataSource(tsClient, tabletserver.SourceOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	base, err := src.Snapshot(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	ch, err := src.Watch(wctx, "/", base.Revision+1)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	var backwards []string
	var watchErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := base.Revision
		for resp := range ch {
			if resp.Err != nil {
				mu.Lock()
				watchErr = resp.Err
				mu.Unlock()
				return
			}
			mu.Lock()
			for _, ev := range resp.Events {
				if ev.Revision <= last {
					backwards = append(backwards, fmt.Sprintf("%s at %d after %d", ev.Path, ev.Revision, last))
				}
				seen[ev.Path] = true
			}
			if resp.Revision < last {
				backwards = append(backwards, fmt.Sprintf("up to %d after %d", resp.Revision, last))
			}
			last = max(last, resp.Revision)
			mu.Unlock()
		}
	}()
	has := func(path string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			if watchErr != nil {
				t.Fatalf("the source's watch failed: %v", watchErr)
			}
			return seen[path]
		}
	}
	createDB("third")
	testutil.WaitFor(t, 30*time.Second, "the source delivers database third", has("/metadata/databases/third"))
	on := src.Current()
	if on == leader {
		t.Fatalf("the source fetches from the leader %s while followers answer", leader)
	}
	var killed *raftProc
	for _, p := range followers {
		if p.client == on {
			killed = p
		}
	}
	if killed == nil {
		t.Fatalf("the source fetches from %s, none of the followers", on)
	}
	killed.kill()
	createDB("fourth")
	testutil.WaitFor(t, 60*time.Second, "the source delivers database fourth after its coordinator died", has("/metadata/databases/fourth"))
	if now := src.Current(); now == on {
		t.Fatalf("the source still fetches from the killed coordinator %s", on)
	}
	mu.Lock()
	if len(backwards) > 0 {
		t.Fatalf("the source went backwards: %v", backwards)
	}
	mu.Unlock()
	wcancel()
	<-done

	// No coordinator answers below what the caller has.
	var alive string
	for _, p := range followers {
		if p != killed {
			alive = p.client
		}
	}
	have := src.Offset()
	var r *adminv1.FetchMetadataResponse
	ahead := have + 1000
	if err := at(alive, func(ctx context.Context, c adminv1.TabletServerServiceClient) (err error) {
		r, err = c.FetchMetadata(ctx, &adminv1.FetchMetadataRequest{FromOffset: ahead, MaxWaitMs: 100})
		return err
	}); err != nil {
		t.Fatalf("fetch ahead of coordinator %s: %v", alive, err)
	}
	if r.NextOffset < ahead || len(r.Records) != 0 || r.AppliedOffset >= ahead-1 || r.AppliedOffset < have {
		t.Fatalf("fetch from %d (ahead of the coordinator): next %d, %d records, applied %d; want next >= %d, none, applied in [%d, %d)",
			ahead, r.NextOffset, len(r.Records), r.AppliedOffset, ahead, have, ahead-1)
	}
	err = at(alive, func(ctx context.Context, c adminv1.TabletServerServiceClient) error {
		_, err := c.FetchMetadataSnapshot(ctx, &adminv1.FetchMetadataSnapshotRequest{MinOffset: ahead})
		return err
	})
	if !errors.Is(err, core.ErrUnavailable) {
		t.Fatalf("snapshot with min_offset %d ahead of coordinator %s: %v; want UNAVAILABLE (retryable)", ahead, alive, err)
	}
	if err := at(alive, func(ctx context.Context, c adminv1.TabletServerServiceClient) error {
		s, err := c.FetchMetadataSnapshot(ctx, &adminv1.FetchMetadataSnapshotRequest{MinOffset: have})
		if err == nil && s.Offset < have {
			err = fmt.Errorf("snapshot at %d below min_offset %d", s.Offset, have)
		}
		return err
	}); err != nil {
		t.Fatalf("snapshot with min_offset %d on coordinator %s: %v", have, alive, err)
	}
}

// notLeaderAt returns the leader address of a NOT_LEADER error.
func notLeaderAt(err error) (string, bool) {
	var nl *core.NotLeaderError
	if !errors.As(err, &nl) {
		return "", false
	}
	return adminapi.HostPort(nl.LeaderAddress), true
}
