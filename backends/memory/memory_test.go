package memory

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/metaplane/metaplane/core"
)

// TestMain fails the package's tests if a goroutine (a heartbeat, a watch,
// the reaper) outlives its store.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newTestStore(t *testing.T, opts StoreOptions) *Store {
	t.Helper()
	s := NewStore(opts)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestFailNextWriteFailsOnceAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	c := newTestStore(t, StoreOptions{}).NewClient(core.ClientOptions{})
	boom := errors.New("injected")
	c.FailNextWrite(boom)
	_, _, err := core.Create(ctx, c, "/a", []byte("x"), core.CreateOptions{})
	if !errors.Is(err, boom) {
		t.Fatalf("first create: got %v, want the injected error", err)
	}
	if _, ok, _ := core.Exists(ctx, c, "/a"); ok {
		t.Fatalf("/a exists after an injected failure")
	}
	if _, _, err := core.Create(ctx, c, "/a", []byte("x"), core.CreateOptions{}); err != nil {
		t.Fatalf("second create: %v (the fault should fire once)", err)
	}
}

func TestSetLatencyDelaysAndHonoursContext(t *testing.T) {
	c := newTestStore(t, StoreOptions{}).NewClient(core.ClientOptions{})
	c.SetLatency(50 * time.Millisecond)
	start := time.Now()
	if _, err := core.Get(context.Background(), c, "/"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("get took %v with 50ms latency injected", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	c.SetLatency(time.Hour)
	if _, err := core.Get(ctx, c, "/"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get under an hour of latency: got %v, want deadline exceeded", err)
	}
	c.SetLatency(0)
	if _, err := core.Get(context.Background(), c, "/"); err != nil {
		t.Fatal(err)
	}
}

func TestHistoryRetentionCompacts(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, StoreOptions{HistoryRetention: 5})
	c := s.NewClient(core.ClientOptions{})
	if _, _, err := core.Create(ctx, c, "/n", nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := core.Set(ctx, c, "/n", []byte{byte(i)}, core.AnyVersion, core.Fence{}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := s.CompactedRevision(), s.Revision()-5; got != want {
		t.Fatalf("compacted revision %d, want %d", got, want)
	}
	if _, err := c.Watch(ctx, "/", s.CompactedRevision()); !errors.Is(err, core.ErrCompacted) {
		t.Fatalf("watch from a compacted revision: got %v, want ErrCompacted", err)
	}
	ch, err := c.Watch(ctx, "/", s.CompactedRevision()+1)
	if err != nil {
		t.Fatalf("watch from the oldest kept revision: %v", err)
	}
	n := 0
	for r := range ch {
		n += len(r.Events)
		if n == 5 {
			break
		}
	}
	s.Compact(s.Revision())
	if got := s.CompactedRevision(); got != s.Revision() {
		t.Fatalf("after Compact: compacted %d, want %d", got, s.Revision())
	}
}

func TestSlowWatcherGetsErrCompactedAndWriterNeverBlocks(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, StoreOptions{HistoryRetention: 50})
	c := s.NewClient(core.ClientOptions{})
	ch, err := c.Watch(ctx, "/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := core.Create(ctx, c, "/n", nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Far more changes than the channel buffer and the retention hold,
	// with nobody reading: the writes must all complete.
	for i := 0; i < 1000; i++ {
		if _, err := core.Set(ctx, c, "/n", nil, core.AnyVersion, core.Fence{}); err != nil {
			t.Fatal(err)
		}
	}
	var last core.WatchResponse
	prev := int64(0)
	for r := range ch {
		if r.Err == nil && r.Revision <= prev {
			t.Fatalf("revision %d after %d", r.Revision, prev)
		}
		prev = r.Revision
		last = r
	}
	if !errors.Is(last.Err, core.ErrCompacted) {
		t.Fatalf("last response of a slow watch: err %v, want ErrCompacted", last.Err)
	}
}

func TestPausedHeartbeatsExpireTheSession(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, StoreOptions{})
	c := s.NewClient(core.ClientOptions{SessionTimeout: 150 * time.Millisecond})
	other := s.NewClient(core.ClientOptions{})
	events, err := c.SessionEvents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := c.Session().ID
	if _, _, err := core.Create(ctx, c, "/eph", nil, core.CreateOptions{Mode: core.Ephemeral}); err != nil {
		t.Fatal(err)
	}
	// Heartbeats running: the session outlives several timeouts.
	time.Sleep(500 * time.Millisecond)
	if c.Session().ID != old {
		t.Fatalf("session expired although heartbeats were running")
	}
	c.PauseHeartbeats()
	timeout := time.After(5 * time.Second)
	var got []core.SessionEvent
	for len(got) < 2 {
		select {
		case ev := <-events:
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("no expiry within 5s of pausing heartbeats; events %v", got)
		}
	}
	if got[0].State != core.SessionExpired || got[0].SessionID != old {
		t.Fatalf("first event %+v, want expired of %#x", got[0], old)
	}
	if got[1].State != core.SessionConnected || got[1].SessionID == old {
		t.Fatalf("second event %+v, want connected with a new id", got[1])
	}
	if _, ok, err := core.Exists(ctx, other, "/eph"); err != nil || ok {
		t.Fatalf("ephemeral after expiry: exists=%v err=%v, want gone", ok, err)
	}
	c.ResumeHeartbeats()
}

func TestExpiredLeaseDeletesItsEphemerals(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, StoreOptions{})
	c := s.NewClient(core.ClientOptions{})
	id, err := c.GrantLease(ctx, "ts-1", 100*time.Millisecond, core.Fence{})
	if err != nil {
		t.Fatal(err)
	}
	path, st, err := core.Create(ctx, c, "/ts", nil, core.CreateOptions{Mode: core.Ephemeral, Lease: id})
	if err != nil {
		t.Fatal(err)
	}
	if st.EphemeralOwner != id {
		t.Fatalf("ephemeral owner %#x, want the lease %#x", st.EphemeralOwner, id)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, ok, err := core.Exists(ctx, c, path)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease ephemeral still there 5s after a 100ms ttl")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.RenewLease(ctx, id); !errors.Is(err, core.ErrSessionExpired) {
		t.Fatalf("renew of an expired lease: got %v, want ErrSessionExpired", err)
	}
}

func TestStoreCloseClosesClients(t *testing.T) {
	s := NewStore(StoreOptions{})
	c := s.NewClient(core.ClientOptions{})
	ch, err := c.Watch(context.Background(), "/", 0)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, ok := <-ch; ok {
		t.Fatalf("watch channel open after the store closed")
	}
	if _, err := core.Get(context.Background(), c, "/"); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("get after store close: got %v, want ErrClosed", err)
	}
	late := s.NewClient(core.ClientOptions{})
	if _, err := core.Get(context.Background(), late, "/"); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("client of a closed store: got %v, want ErrClosed", err)
	}
}

func TestProviderClients(t *testing.T) {
	ctx := context.Background()
	p := NewProvider(StoreOptions{MaxValueSize: 10})
	defer p.Close()
	if err := p.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	a, err := p.NewClient(ctx, core.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.NewClient(ctx, core.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Session().ID == b.Session().ID {
		t.Fatalf("two clients share session %#x", a.Session().ID)
	}
	if _, _, err := core.Create(ctx, a, "/x", nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Get(ctx, b, "/x"); err != nil {
		t.Fatalf("second client of one provider does not see the first's write: %v", err)
	}
	if got := a.Capabilities().MaxValueSize; got != 10 {
		t.Fatalf("MaxValueSize %d, want 10", got)
	}
	p.Close()
	if _, err := p.NewClient(ctx, core.ClientOptions{}); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("NewClient after Close: got %v, want ErrClosed", err)
	}
}

func TestElectionIsFirstComeFirstServedFromEpochZero(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, StoreOptions{})
	a, b, c := s.NewClient(core.ClientOptions{}), s.NewClient(core.ClientOptions{}), s.NewClient(core.ClientOptions{})
	la, err := a.Campaign(ctx, core.Candidate{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if la.Epoch() != 0 {
		t.Fatalf("first leader's epoch %d, want 0", la.Epoch())
	}
	got := make(chan string, 2)
	campaign := func(cl *Backend, id string) {
		l, err := cl.Campaign(ctx, core.Candidate{ID: id})
		if err != nil {
			got <- "error " + err.Error()
			return
		}
		got <- id
		<-l.Lost()
	}
	go campaign(b, "b")
	waitQueued(t, s, 1)
	go campaign(c, "c")
	waitQueued(t, s, 2)
	la.Resign(ctx)
	if first := <-got; first != "b" {
		t.Fatalf("after a resigned, %s was elected; want b, the first to campaign", first)
	}
	b.Close()
	if second := <-got; second != "c" {
		t.Fatalf("then %s; want c", second)
	}
	info, err := a.Leader(ctx)
	if err != nil || info.ID != "c" || info.Epoch != 2 {
		t.Fatalf("leader %+v, %v; want c at epoch 2", info, err)
	}
}

// waitQueued waits until n candidates wait in the store's election queue.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		q := len(s.queue)
		s.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d candidates queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTreeChoices(t *testing.T) {
	ctx := context.Background()
	c := newTestStore(t, StoreOptions{}).NewClient(core.ClientOptions{})
	if err := core.Delete(ctx, c, "/", core.AnyVersion, core.Fence{}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("delete /: got %v, want ErrInvalidArgument", err)
	}
	if _, _, err := core.Create(ctx, c, "/p", nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The suffix is the parent's child-change counter: it starts at 0 and
	// counts deletes too.
	first, _, err := core.Create(ctx, c, "/p/", nil, core.CreateOptions{Mode: core.PersistentSequential})
	if err != nil || first != "/p/0000000000" {
		t.Fatalf("sequential create of /p/: %q, %v; want /p/0000000000", first, err)
	}
	if err := core.Delete(ctx, c, first, core.AnyVersion, core.Fence{}); err != nil {
		t.Fatal(err)
	}
	next, _, err := core.Create(ctx, c, "/p/n-", nil, core.CreateOptions{Mode: core.PersistentSequential})
	if err != nil || next != "/p/n-0000000002" {
		t.Fatalf("after a create and a delete: %q, %v; want /p/n-0000000002", next, err)
	}
	// Revisions: one per transaction, check-only ones included.
	before := c.Store().Revision()
	res, err := c.Txn(ctx, []core.Op{core.CheckOp("/p", 0)}, core.TxnOptions{})
	if err != nil || res.Revision != before+1 {
		t.Fatalf("check-only txn: revision %d, %v; want %d", res.Revision, err, before+1)
	}
	if _, _, err := core.Create(ctx, c, "/p/x", nil, core.CreateOptions{Mode: core.Ephemeral, Lease: 12345}); !errors.Is(err, core.ErrSessionExpired) {
		t.Fatalf("create under an unknown lease: got %v, want ErrSessionExpired", err)
	}
	if _, _, err := core.Create(ctx, c, "/p/y", nil, core.CreateOptions{Lease: 12345}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("persistent create with a lease: got %v, want ErrInvalidArgument", err)
	}
}

// TestSubscribersNeedNoGoroutine subscribes many session-event and leader
// observers: none of them may cost a goroutine, each gets what is
// published, and each channel closes when its context ends.
func TestSubscribersNeedNoGoroutine(t *testing.T) {
	const n = 200
	s := newTestStore(t, StoreOptions{})
	c := s.NewClient(core.ClientOptions{})
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := runtime.NumGoroutine()
	events := make([]<-chan core.SessionEvent, n)
	leaders := make([]<-chan core.LeaderInfo, n)
	for i := range n {
		var err error
		if events[i], err = c.SessionEvents(ctx); err != nil {
			t.Fatal(err)
		}
		if leaders[i], err = c.ObserveLeader(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if after := runtime.NumGoroutine(); after > before+10 {
		t.Fatalf("goroutines: %d before %d subscriptions, %d after; want none per subscriber", before, 2*n, after)
	}
	old := c.Session().ID
	if err := c.ExpireSession(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.Campaign(ctx, core.Candidate{ID: "c1", Address: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if ev := <-events[i]; ev.State != core.SessionExpired || ev.SessionID != old {
			t.Fatalf("subscriber %d: first event %+v, want SessionExpired of %#x", i, ev, old)
		}
		if ev := <-events[i]; ev.State != core.SessionConnected || ev.SessionID != c.Session().ID {
			t.Fatalf("subscriber %d: second event %+v, want SessionConnected of %#x", i, ev, c.Session().ID)
		}
		if li := <-leaders[i]; li.ID != "c1" || li.Epoch != l.Epoch() {
			t.Fatalf("observer %d: got %+v, want c1 at epoch %d", i, li, l.Epoch())
		}
	}
	cancel()
	for i := range n {
		if ev, ok := <-events[i]; ok {
			t.Fatalf("subscriber %d: got %+v after its ctx ended, want the channel closed", i, ev)
		}
		if li, ok := <-leaders[i]; ok {
			t.Fatalf("observer %d: got %+v after its ctx ended, want the channel closed", i, li)
		}
	}
}
