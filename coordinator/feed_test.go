package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// countingWatches counts the watches opened on a memory client.
type countingWatches struct {
	*memory.Backend
	watches atomic.Int64
}

func (c *countingWatches) Watch(ctx context.Context, prefix string, from int64) (<-chan core.WatchResponse, error) {
	c.watches.Add(1)
	return c.Backend.Watch(ctx, prefix, from)
}

// TestMetadataStreamFeed: many FETCH_METADATA pollers are served from the
// coordinator's in-memory feed (one watch, besides the image's), each
// receiving every change once, in order, from its own offset; a poll from
// an offset older than the feed holds is served by a watch of its own.
func TestMetadataStreamFeed(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	var cw *countingWatches
	a := harness.StartCoordinator(t, s, coordinator.Options{MetadataStreamFeed: 50, Open: func(ctx context.Context) (core.MetadataBackend, error) {
		cw = &countingWatches{Backend: s.NewClient(core.ClientOptions{SessionTimeout: 2 * time.Second})}
		return cw, nil
	}})
	testutil.WaitFor(t, 5*time.Second, "coordinator leads", a.Srv.IsLeader)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t, a.Addr)
	fetch := func(from int64) *adminv1.FetchMetadataResponse {
		t.Helper()
		var r *adminv1.FetchMetadataResponse
		if err := c.Tablets(ctx, func(ctx context.Context, tc adminv1.TabletServerServiceClient) (err error) {
			r, err = tc.FetchMetadata(ctx, &adminv1.FetchMetadataRequest{FromOffset: from, MaxWaitMs: 100})
			return err
		}); err != nil {
			t.Fatalf("fetch from %d: %v", from, err)
		}
		return r
	}
	start := s.Revision() + 1
	fetch(start) // starts the feed
	base := cw.watches.Load()

	const pollers, dbs = 8, 20
	var wg sync.WaitGroup
	got := make([][]string, pollers)
	errs := make(chan error, pollers)
	for p := 0; p < pollers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			from := start
			last := int64(0)
			for len(got[p]) < dbs && ctx.Err() == nil {
				r := fetch(from)
				if r.NextOffset < from {
					errs <- fmt.Errorf("poller %d: next offset %d below %d", p, r.NextOffset, from)
					return
				}
				for _, rec := range r.Records {
					if rec.Offset < from || rec.Offset < last {
						errs <- fmt.Errorf("poller %d: record at %d after %d (from %d)", p, rec.Offset, last, from)
						return
					}
					last = rec.Offset
					if rec.Type == adminv1.MetadataRecord_CREATED && len(rec.Path) > len("/metadata/databases/") && rec.Path[:len("/metadata/databases/")] == "/metadata/databases/" {
						got[p] = append(got[p], rec.Path)
					}
				}
				from = r.NextOffset
			}
		}(p)
	}
	for i := 0; i < dbs; i++ {
		if err := c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) error {
			_, err := ac.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: fmt.Sprintf("db%02d", i)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for p := range got {
		if len(got[p]) != dbs {
			t.Fatalf("poller %d got %d databases, want %d: %v", p, len(got[p]), dbs, got[p])
		}
		for i, path := range got[p] {
			if want := fmt.Sprintf("/metadata/databases/db%02d", i); path != want {
				t.Fatalf("poller %d: database %d is %s, want %s", p, i, path, want)
			}
		}
	}
	if n := cw.watches.Load() - base; n != 0 {
		t.Fatalf("%d watches opened for %d pollers' fetches; want none beyond the feed's", n, pollers)
	}
	// The feed holds 50 events: after 60 more changes the first ones are
	// gone from it, and a poll from there opens its own watch (and still
	// gets them).
	for i := 0; i < 60; i++ {
		if err := c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) error {
			_, err := ac.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: fmt.Sprintf("more%02d", i)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	head := fetch(s.Revision()) // the feed has caught up with the store
	if head.NextOffset != s.Revision()+1 {
		t.Fatalf("fetch at the head: next %d, want %d", head.NextOffset, s.Revision()+1)
	}
	base = cw.watches.Load()
	r := fetch(start)
	if len(r.Records) == 0 || r.Records[0].Offset < start {
		t.Fatalf("fetch from %d past the feed: %+v", start, r)
	}
	if cw.watches.Load() == base {
		t.Fatalf("a fetch older than the feed holds opened no watch of its own")
	}
}

// TestFetchMetadataStream: fetches over one FetchMetadataStream are
// answered as FetchMetadata answers them (one response per request, in
// order, each from the request's offset), and a request FetchMetadata
// refuses ends the stream with FetchMetadata's status.
func TestFetchMetadataStream(t *testing.T) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	a := harness.StartCoordinator(t, s, coordinator.Options{})
	testutil.WaitFor(t, 5*time.Second, "coordinator leads", a.Srv.IsLeader)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t, a.Addr)
	var st adminv1.TabletServerService_FetchMetadataStreamClient
	if err := c.TabletsAt(ctx, a.Addr, func(_ context.Context, tc adminv1.TabletServerServiceClient) (err error) {
		st, err = tc.FetchMetadataStream(ctx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	from := s.Revision() + 1
	var got []string
	for i := 0; i < 5; i++ {
		if err := c.Admin(ctx, func(ctx context.Context, ac adminv1.AdminServiceClient) error {
			_, err := ac.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: fmt.Sprintf("sdb%d", i)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		// Fetch until this database has come (a fetch may end empty).
		want := fmt.Sprintf("/metadata/databases/sdb%d", i)
		for len(got) == 0 || got[len(got)-1] != want {
			if err := st.Send(&adminv1.FetchMetadataRequest{FromOffset: from, MaxWaitMs: 200}); err != nil {
				t.Fatal(err)
			}
			r, err := st.Recv()
			if err != nil {
				t.Fatalf("fetch %d from %d over the stream: %v", i, from, err)
			}
			if r.NextOffset < from {
				t.Fatalf("next offset %d below the request's %d", r.NextOffset, from)
			}
			for _, rec := range r.Records {
				if rec.Offset < from {
					t.Fatalf("record at %d, before the request's %d", rec.Offset, from)
				}
				if rec.Type == adminv1.MetadataRecord_CREATED && strings.HasPrefix(rec.Path, "/metadata/databases/sdb") {
					got = append(got, rec.Path)
				}
			}
			from = r.NextOffset
			if ctx.Err() != nil {
				t.Fatalf("databases seen: %v, waiting for %s", got, want)
			}
		}
	}
	if len(got) != 5 {
		t.Fatalf("databases over the stream: %v, want sdb0..sdb4 once each", got)
	}
	// FetchMetadata refuses offset 0 (take a snapshot first): so does the
	// stream, and it ends.
	if err := st.Send(&adminv1.FetchMetadataRequest{FromOffset: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(adminapi.FromStatus(err), core.ErrCompacted) {
		t.Fatalf("fetch from 0 over the stream: %v, want OFFSET_COMPACTED (core.ErrCompacted)", err)
	}
	if _, err := st.Recv(); err == nil {
		t.Fatal("the stream went on after a refused fetch")
	}
}
