package zookeeper

import (
	"context"
	"testing"
	"time"

	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/zktest"
)

// TestLinearizableUnderServerRestart: the conformance register history on
// a three-server ensemble while the server most clients are connected to
// is killed and restarted (twice): the clients move to other servers
// within their sessions, calls cut off are writes of unknown outcome, and
// porcupine must find the history linearizable. The same history with
// reads made deliberately stale must fail (the negative control, every
// run).
func TestLinearizableUnderServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-server ensemble; skipped with -short")
	}
	ens := zktest.StartEnsemble(t, 3)
	o := Options{
		Address:           ens.ConnectString(),
		Root:              "/faults",
		SessionTimeout:    6 * time.Second,
		ConnectionTimeout: 20 * time.Second,
		RetryWait:         100 * time.Millisecond,
		MaxRetryAttempts:  5,
	}
	bs := []*Backend{open(t, o), open(t, o), open(t, o), open(t, o)}
	clients := make([]core.MetadataBackend, len(bs))
	for i, b := range bs {
		clients[i] = b
	}
	restart := conformance.Fault{Name: "restart of the connected server", Inject: func(ctx context.Context) error {
		n := make([]int, ens.Size())
		for _, b := range bs {
			for i, a := range ens.Addrs() {
				if b.conn.Server() == a {
					n[i]++
				}
			}
		}
		most := 0
		for i := range n {
			if n[i] > n[most] {
				most = i
			}
		}
		t.Logf("restarting server %d (%d of %d clients connected to it)", most+1, n[most], len(bs))
		ens.Kill(most)
		return ens.Restart(most)
	}}
	conformance.RunLinearizableUnderFaults(t, conformance.FaultHistory{
		Clients: clients,
		Faults:  []conformance.Fault{restart, restart},
	})
}
