package bench

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
)

// memoryBucketRig is a bucketRig on an in-process coordinator over a
// memory store, its tablet servers registering through the coordinator
// (leases) or, with sessions, by ephemeral nodes of their own.
func memoryBucketRig(t *testing.T, sessions bool) *bucketRig {
	t.Helper()
	store := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { store.Close() })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := coordinator.New(coordinator.Options{
		Open: func(ctx context.Context) (core.MetadataBackend, error) {
			return store.NewClient(core.ClientOptions{SessionTimeout: 10 * time.Second}), nil
		},
		Listener: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		TabletServerSessionTimeout: time.Second, MetadataStreamMaxWait: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.After(10 * time.Second)
	for !srv.IsLeader() {
		select {
		case <-srv.RoleChanged():
		case err := <-done:
			t.Fatalf("coordinator stopped before leading: %v", err)
		case <-deadline:
			t.Fatal("coordinator not leader after 10s")
		}
	}
	admin, err := adminclient.NewClient([]string{l.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	rig := &bucketRig{backend: Memory, admin: admin}
	if sessions {
		rig.session = func(ctx context.Context) (core.MetadataBackend, error) {
			return store.NewClient(core.ClientOptions{SessionTimeout: 10 * time.Second}), nil
		}
	}
	return rig
}

// TestTabletLoss runs the tablet-loss measurement at its smallest on the
// memory backend, both ways a tablet server registers: every one of the
// lost server's buckets is seen re-led (on the metadata stream, where
// followed) and the survivor told, after the registration went.
func TestTabletLoss(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sessions bool
	}{{"lease", false}, {"session", true}} {
		t.Run(tc.name, func(t *testing.T) {
			rig := memoryBucketRig(t, tc.sessions)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			m, err := measureTabletLoss(ctx, rig, 100, 60, t.Logf)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", m)
			if m.Buckets != 200 || m.Led < 90 || m.Led > 110 {
				t.Errorf("buckets %d, led %d: want 200, about 100", m.Buckets, m.Led)
			}
			if m.Notifications < 1 || m.NotifyBytes <= 0 {
				t.Errorf("notifications %d (%d bytes): want the survivor's notification counted", m.Notifications, m.NotifyBytes)
			}
			if m.ExpiryMicros <= 0 {
				t.Errorf("expiry %v µs after the registration ended: want a positive time", m.ExpiryMicros)
			}
			if want := map[bool]int{false: m.Led, true: 0}[tc.sessions]; m.RecordsSeen != want {
				t.Errorf("%d of the lost server's records seen re-led on the stream, want %d", m.RecordsSeen, want)
			}
			if tc.sessions && m.WrittenMicros != 0 {
				t.Errorf("written %v µs: the registrations' watch sees no record", m.WrittenMicros)
			}
		})
	}
}

// TestAdjustIsrRates runs both AdjustIsr forms briefly on the memory
// backend: updates counted, none refused (each request chains on the
// epochs the last answer gave).
func TestAdjustIsrRates(t *testing.T) {
	rig := memoryBucketRig(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rates, err := measureAdjustIsr(ctx, rig, 2, 10, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(rates) != 2 || rates[0].Form != AdjustBatched || rates[1].Form != AdjustSingle {
		t.Fatalf("rates %+v: want the batched form then the single", rates)
	}
	for _, r := range rates {
		t.Logf("%+v", r)
		if r.Updates == 0 || r.Refused != 0 || r.Failed != 0 {
			t.Errorf("%s: %d updates, %d refused, %d failed: want updates, no refusal, no failure", r.Form, r.Updates, r.Refused, r.Failed)
		}
		if r.Form == AdjustBatched && r.Updates < 10*r.Requests {
			t.Errorf("batched: %d updates in %d requests: want 10 per request", r.Updates, r.Requests)
		}
	}
}

// TestBucketsTargets: each target met, not met or not measured from the
// figures.
func TestBucketsTargets(t *testing.T) {
	fig := func(raftLoss float64, led int, raftRate, zkRate float64) *Buckets {
		return &Buckets{
			Loss: []BucketLoss{{Backend: Raft, Led: led / 5, NotifiedMicros: 100}, {Backend: Raft, Led: led, Buckets: 2 * led, NotifiedMicros: raftLoss},
				{Backend: ZooKeeper, Led: led, NotifiedMicros: 5e6}},
			Adjust: []AdjustIsrRate{{Backend: Raft, Form: AdjustBatched, UpdatesPerSec: raftRate}, {Backend: ZooKeeper, Form: AdjustBatched, UpdatesPerSec: zkRate}},
		}
	}
	for _, tc := range []struct {
		name       string
		b          *Buckets
		loss, rate string
	}{
		{"met", fig(1.5e6, 50_000, 50_000, 5_000), TargetMet, TargetMet},
		{"not met", fig(2.5e6, 50_000, 20_000, 5_000), TargetNotMet, TargetNotMet},
		{"quick", fig(0.5e6, 5_000, 20_000, 1_000), TargetNotMeasured, TargetMet},
		{"none", nil, TargetNotMeasured, TargetNotMeasured},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := bucketsTargets(tc.b)
			if len(got) != 2 || got[0].Status != tc.loss || got[1].Status != tc.rate {
				t.Errorf("got %+v, want loss %s, rate %s", got, tc.loss, tc.rate)
			}
		})
	}
}
