package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/zktest"
)

// TestChaosElectionFencing (METAPLANE_SOAK=1): three coordinators, each
// behind its own proxy, campaign and write fenced nodes as fast as they
// can while the proxies randomly partition them. Invariant: ordered by
// zxid, the epochs of the nodes that landed never decrease (no write of an
// older leader lands after a newer leader's), and each epoch's writes were
// made by one coordinator.
func TestChaosElectionFencing(t *testing.T) {
	if os.Getenv("METAPLANE_SOAK") != "1" {
		t.Skip("chaos test: set METAPLANE_SOAK=1")
	}
	o := testOptions(t)
	o.SessionTimeout = haTimeout
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const n = 3
	proxies := make([]*zktest.Proxy, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		proxies[i] = zktest.StartProxy(t, o.Address)
		co := o
		co.Address = proxies[i].Addr()
		c := open(t, co)
		id := fmt.Sprintf("c%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := 0
			for ctx.Err() == nil {
				l, err := c.Campaign(ctx, core.Candidate{ID: id, Address: id})
				if err != nil {
					continue
				}
				// Keep writing with this fence for a session timeout past
				// Lost, as a coordinator slow to notice would.
				var lostAt time.Time
				for ctx.Err() == nil {
					select {
					case <-l.Lost():
						if lostAt.IsZero() {
							lostAt = time.Now()
						}
					default:
					}
					if !lostAt.IsZero() && time.Since(lostAt) > haTimeout {
						break
					}
					seq++
					data := fmt.Sprintf("%d %s", l.Epoch(), id)
					_, _, err := core.Create(ctx, c, fmt.Sprintf("/chaos/%s-%06d", id, seq), []byte(data),
						core.CreateOptions{MakeParents: true, Fence: l.Fence()})
					if err != nil && !errors.Is(err, core.ErrFenced) && !errors.Is(err, core.ErrUnavailable) && ctx.Err() == nil {
						t.Errorf("%s: unexpected write error: %v", id, err)
					}
					time.Sleep(5 * time.Millisecond) // keep the tree small
				}
				l.Resign(context.Background())
			}
		}()
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for round := 0; ctx.Err() == nil && round < 20; round++ {
		i := rng.Intn(n)
		switch rng.Intn(3) {
		case 0:
			proxies[i].Cut()
		case 1:
			proxies[i].SetMode(zktest.Blackhole)
		}
		select {
		case <-time.After(time.Duration(500+rng.Intn(3000)) * time.Millisecond):
		case <-ctx.Done():
		}
		proxies[i].Restore()
	}
	cancel()
	wg.Wait()

	check := open(t, o)
	snap, err := check.Snapshot(testutil.Context(t, 30*time.Second), "/chaos")
	if err != nil {
		t.Fatal(err)
	}
	nodes := snap.Nodes[1:]
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Stat.CreateRevision < nodes[j].Stat.CreateRevision })
	last := int64(-1)
	owner := map[int64]string{}
	for _, nd := range nodes {
		var epoch int64
		var id string
		if _, err := fmt.Sscanf(string(nd.Data), "%d %s", &epoch, &id); err != nil {
			t.Fatalf("%s: %q", nd.Path, nd.Data)
		}
		if epoch < last {
			t.Fatalf("%s written at epoch %d after a write at epoch %d landed", nd.Path, epoch, last)
		}
		if o, ok := owner[epoch]; ok && o != id {
			t.Fatalf("epoch %d written by %s and %s", epoch, o, id)
		}
		owner[epoch], last = id, epoch
	}
	t.Logf("%d fenced writes landed over %d epochs", len(nodes), len(owner))
	if len(owner) < 2 {
		t.Fatalf("only %d epoch(s): the chaos did not change the leader", len(owner))
	}
}
