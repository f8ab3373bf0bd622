package plugins_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/plugins"
	"github.com/metaplane/metaplane/plugins/plugintest"
)

// recordingProvider wraps the memory provider so a test sees, inside the
// plugin, the contexts the host's calls arrive with.
type recordingProvider struct {
	*memory.Provider
	campaignStarted chan struct{}
	campaignEnded   chan error // the plugin-side Campaign ctx's error
	getDeadline     chan time.Time
}

func (p *recordingProvider) NewClient(ctx context.Context, opts core.ClientOptions) (core.MetadataBackend, error) {
	b, err := p.Provider.NewClient(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &recordingBackend{MetadataBackend: b, p: p}, nil
}

type recordingBackend struct {
	core.MetadataBackend
	p *recordingProvider
}

func (b *recordingBackend) Campaign(ctx context.Context, c core.Candidate) (core.Leadership, error) {
	if c.ID == "watched" {
		b.p.campaignStarted <- struct{}{}
		l, err := b.MetadataBackend.Campaign(ctx, c)
		<-ctx.Done()
		b.p.campaignEnded <- ctx.Err()
		return l, err
	}
	return b.MetadataBackend.Campaign(ctx, c)
}

func (b *recordingBackend) GetMany(ctx context.Context, paths []string, opts core.ReadOptions) ([]core.GetResult, error) {
	if d, ok := ctx.Deadline(); ok {
		select {
		case b.p.getDeadline <- d:
		default:
		}
	}
	return b.MetadataBackend.GetMany(ctx, paths, opts)
}

func connect(t *testing.T, prov core.Provider) *plugins.Plugin {
	t.Helper()
	p, closeConn := plugintest.ConnectInProcess(t, prov, plugintest.Options{})
	t.Cleanup(func() {
		_ = p.Close()
		closeConn()
	})
	return p
}

func client(t *testing.T, p *plugins.Plugin) core.MetadataBackend {
	t.Helper()
	c, err := p.NewClient(context.Background(), core.ClientOptions{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestCampaignCancelCrossesBoundary: cancelling a Campaign on the host
// cancels the plugin-side Campaign's context, so the candidacy is
// withdrawn: when the leader resigns, nobody is elected.
func TestCampaignCancelCrossesBoundary(t *testing.T) {
	prov := &recordingProvider{
		Provider:        memory.NewProvider(memory.StoreOptions{}),
		campaignStarted: make(chan struct{}, 1),
		campaignEnded:   make(chan error, 1),
		getDeadline:     make(chan time.Time, 1),
	}
	p := connect(t, prov)
	leader, waiter := client(t, p), client(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	l, err := leader.Campaign(ctx, core.Candidate{ID: "leader", Address: "a"})
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	result := make(chan error, 1)
	go func() {
		_, err := waiter.Campaign(cctx, core.Candidate{ID: "watched", Address: "b"})
		result <- err
	}()
	select {
	case <-prov.campaignStarted:
	case <-time.After(10 * time.Second):
		t.Fatal("the campaign did not reach the plugin")
	}
	ccancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled campaign returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled campaign did not return")
	}
	select {
	case err := <-prov.campaignEnded:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("plugin-side campaign context ended with %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin-side campaign context was not cancelled")
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if li, err := leader.Leader(ctx); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("after the leader resigned: leader %+v, err %v; want ErrNotFound (the cancelled candidacy withdrawn)", li, err)
	}
}

// TestDeadlineCrossesBoundary: the host's deadline reaches the plugin's
// context, and a plugin call that outlives it fails on the host with
// context.DeadlineExceeded.
func TestDeadlineCrossesBoundary(t *testing.T) {
	prov := &recordingProvider{
		Provider:    memory.NewProvider(memory.StoreOptions{}),
		getDeadline: make(chan time.Time, 1),
	}
	p := connect(t, prov)
	c := client(t, p)
	deadline := time.Now().Add(5 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if _, err := core.Get(ctx, c, "/"); err != nil && !errors.Is(err, core.ErrNotFound) {
		t.Fatal(err)
	}
	select {
	case d := <-prov.getDeadline:
		if diff := d.Sub(deadline); diff > 100*time.Millisecond || diff < -time.Second {
			t.Errorf("plugin-side deadline %v, host deadline %v", d, deadline)
		}
	default:
		t.Fatal("the plugin-side call had no deadline")
	}

	// A slow plugin call and a short host deadline.
	direct := memory.NewProvider(memory.StoreOptions{})
	p2 := connect(t, direct)
	c2 := client(t, p2)
	fi, _ := core.Optional[core.FaultInjector](c2)
	fi.SetLatency(time.Minute)
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	start := time.Now()
	_, err := core.Get(short, c2, "/")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow call: %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the slow call returned after %v", took)
	}
}

// undeclaringProvider serves memory clients that implement every optional
// part the memory backend has but declare none of them.
type undeclaringProvider struct{ *memory.Provider }

func (p undeclaringProvider) NewClient(ctx context.Context, opts core.ClientOptions) (core.MetadataBackend, error) {
	b, err := p.Provider.NewClient(ctx, opts)
	if err != nil {
		return nil, err
	}
	return undeclaringBackend{b.(*memory.Backend)}, nil
}

type undeclaringBackend struct{ *memory.Backend }

func (undeclaringBackend) Capabilities() core.Capabilities { return core.Capabilities{Name: "bare"} }

// optionalParts reports, for each optional part, whether a bare type
// assertion finds it on b and whether core.Optional does.
func optionalParts(b core.MetadataBackend) (asserted, found map[string]bool) {
	asserted, found = map[string]bool{}, map[string]bool{}
	_, asserted["LeaseManager"] = b.(core.LeaseManager)
	_, found["LeaseManager"] = core.Optional[core.LeaseManager](b)
	_, asserted["IDAllocator"] = b.(core.IDAllocator)
	_, found["IDAllocator"] = core.Optional[core.IDAllocator](b)
	_, asserted["MembershipManager"] = b.(core.MembershipManager)
	_, found["MembershipManager"] = core.Optional[core.MembershipManager](b)
	_, asserted["FaultInjector"] = b.(core.FaultInjector)
	_, found["FaultInjector"] = core.Optional[core.FaultInjector](b)
	_, asserted["SessionExpirer"] = b.(core.SessionExpirer)
	_, found["SessionExpirer"] = core.Optional[core.SessionExpirer](b)
	_, asserted["LeadershipTransferer"] = b.(core.LeadershipTransferer)
	_, found["LeadershipTransferer"] = core.Optional[core.LeadershipTransferer](b)
	return asserted, found
}

// TestOptionalPartsAreHonest: across the plugin boundary the host's client
// offers exactly the optional parts the plugin's backend both implements
// and declares. A backend that declares none (though it implements some)
// and one that hides them (recordingBackend) offer none, to a type
// assertion and to core.Optional alike; AllocateIDs still works through
// core's compare-and-set loop. The memory backend offers what it declares.
func TestOptionalPartsAreHonest(t *testing.T) {
	ctx := context.Background()
	hiding := &recordingProvider{Provider: memory.NewProvider(memory.StoreOptions{}), getDeadline: make(chan time.Time, 1)}
	for name, prov := range map[string]core.Provider{
		"declares none": undeclaringProvider{memory.NewProvider(memory.StoreOptions{})},
		"hides all":     hiding,
	} {
		t.Run(name, func(t *testing.T) {
			c := client(t, connect(t, prov))
			asserted, found := optionalParts(c)
			for part := range asserted {
				if asserted[part] || found[part] {
					t.Errorf("%s: type assertion %v, core.Optional %v; want both false", part, asserted[part], found[part])
				}
			}
			if _, ok := plugins.ClientOf(c); !ok {
				t.Errorf("ClientOf(%T) found no *plugins.Client", c)
			}
			first, err := core.AllocateIDs(ctx, c, "/counters/x", 10, core.Fence{})
			if err != nil || first != 0 {
				t.Fatalf("AllocateIDs: %d, %v", first, err)
			}
			if first, err := core.AllocateIDs(ctx, c, "/counters/x", 5, core.Fence{}); err != nil || first != 10 {
				t.Fatalf("second AllocateIDs: %d, %v; want 10", first, err)
			}
		})
	}

	full := client(t, connect(t, memory.NewProvider(memory.StoreOptions{})))
	asserted, found := optionalParts(full)
	want := map[string]bool{"LeaseManager": true, "FaultInjector": true, "SessionExpirer": true, "IDAllocator": false, "MembershipManager": false,
		"LeadershipTransferer": false}
	for part, w := range want {
		if found[part] != w || (asserted[part] && !w) {
			t.Errorf("memory backend, %s: core.Optional %v (type assertion %v); want %v", part, found[part], asserted[part], w)
		}
	}
	lm, _ := core.Optional[core.LeaseManager](full)
	id, err := lm.GrantLease(ctx, "ts-1", time.Minute, core.Fence{})
	if err != nil || id == 0 {
		t.Fatalf("GrantLease through the part layer: %d, %v", id, err)
	}
	if err := lm.RenewLease(ctx, id); err != nil {
		t.Fatalf("RenewLease: %v", err)
	}
}
