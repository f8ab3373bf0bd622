package netfault_test

import (
	"testing"
	"time"

	"github.com/metaplane/metaplane/internal/netfault"
)

// zkSession is the coordinators' ZooKeeper session timeout: a leader cut
// from the ensemble loses its leadership (and another takes it) about
// this long after the cut.
const zkSession = "2s"

// startZooKeeperCluster starts a three-server ensemble on nodes 3..5 and
// three coordinators on the ZooKeeper backend on nodes 0..2, each in its
// own namespace.
func startZooKeeperCluster(t *testing.T) (*netfault.Net, *netfault.ZooKeeper, []*netfault.Coordinator) {
	nt := netfault.New(t, 6)
	z := nt.StartZooKeeper([]int{3, 4, 5})
	cs := nt.StartZooKeeperCoordinators([]int{0, 1, 2}, z.ConnectString(),
		"zookeeper.client.session-timeout="+zkSession, "zookeeper.client.connection-timeout=1s", "zookeeper.client.retry-wait=200ms")
	return nt, z, cs
}

// TestZooKeeperFaultShort is the short scenario on the ZooKeeper backend:
// a three-server ensemble and three coordinators, each in its own
// namespace; the coordinator leader is cut from the ensemble (TCP resets
// both ways) until another coordinator leads, under a checked history,
// with the FIP-9 fencing check: writes sent to the old leader once its
// epoch is stale are refused and never appear.
func TestZooKeeperFaultShort(t *testing.T) {
	nt, z, cs := startZooKeeperCluster(t)
	var f netfault.Fault
	for _, x := range netfault.ZooKeeperFaults(z) {
		if x.Name == "zk-leader-cut-from-ensemble-refuse" {
			f = x
		}
	}
	r := netfault.Scenario{Net: nt, Coords: cs, Fault: f, Seed: seed(t),
		Warm: time.Second, Hold: 5 * time.Second, After: 2 * time.Second}.Run(t)
	if r.LeaderChanges == 0 {
		t.Errorf("%s: the leader cut from the ensemble kept the leadership", f.Name)
	}
	if r.Fenced == 0 {
		t.Errorf("%s: no write reached the stale leader to be refused: the fencing check saw nothing", f.Name)
	}
}

// TestZooKeeperFaults runs every ZooKeeper fault of the set, each on a
// fresh ensemble and coordinators (make faults; METAPLANE_FAULTS=1).
func TestZooKeeperFaults(t *testing.T) {
	if !full() {
		t.Skip("the whole set runs under make faults (METAPLANE_FAULTS=1)")
	}
	sd := seed(t)
	var rs []netfault.Result
	for i := range netfault.ZooKeeperFaults(nil) {
		t.Run(netfault.ZooKeeperFaults(nil)[i].Name, func(t *testing.T) {
			nt, z, cs := startZooKeeperCluster(t)
			f := netfault.ZooKeeperFaults(z)[i]
			rs = append(rs, netfault.Scenario{Net: nt, Coords: cs, Fault: f, Seed: sd + uint64(i),
				Warm: 2 * time.Second, Hold: max(hold(t), 5*time.Second), After: 2 * time.Second}.Run(t))
		})
	}
	t.Logf("zookeeper summary (fault | leader changes | longest gap between acknowledged writes | operations | violations):\n%s", netfault.Summary(rs))
}
