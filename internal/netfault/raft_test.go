package netfault_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/metaplane/metaplane/internal/netfault"
)

// seed is METAPLANE_FAULTS_SEED, or one from the clock (logged).
func seed(t *testing.T) uint64 {
	if s := os.Getenv("METAPLANE_FAULTS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("METAPLANE_FAULTS_SEED=%q: %v", s, err)
		}
		return v
	}
	v := uint64(time.Now().UnixNano())
	t.Logf("seed %d (METAPLANE_FAULTS_SEED to repeat)", v)
	return v
}

// full says whether the whole set runs (make faults).
func full() bool { return os.Getenv("METAPLANE_FAULTS") != "" }

// hold is how long each fault of the whole set holds
// (METAPLANE_FAULTS_HOLD, a duration, default 5s).
func hold(t *testing.T) time.Duration {
	if s := os.Getenv("METAPLANE_FAULTS_HOLD"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("METAPLANE_FAULTS_HOLD=%q: %v", s, err)
		}
		return d
	}
	return 5 * time.Second
}

// TestRaftFaultShort is the short scenario `make test` runs on the Raft
// backend: three coordinators, each in its own namespace, the leader's
// link to one follower refused with TCP resets both ways for three
// seconds (the leader keeps its majority: no leader change), under a
// checked history.
func TestRaftFaultShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three coordinators in network namespaces")
	}
	nt := netfault.New(t, 3)
	cs := nt.StartRaftCoordinators([]int{0, 1, 2})
	netfault.Scenario{Net: nt, Coords: cs, Fault: netfault.FaultByName("leader-follower-refuse-both"), Seed: seed(t),
		Warm: time.Second, Hold: 3 * time.Second, After: time.Second}.Run(t)
}

// TestRaftFaults runs every fault of the set on the Raft backend, each on
// a fresh cluster (make faults; METAPLANE_FAULTS=1).
func TestRaftFaults(t *testing.T) {
	if !full() {
		t.Skip("the whole set runs under make faults (METAPLANE_FAULTS=1)")
	}
	sd := seed(t)
	var rs []netfault.Result
	for i, f := range netfault.Faults() {
		t.Run(f.Name, func(t *testing.T) {
			nt := netfault.New(t, 3)
			cs := nt.StartRaftCoordinators([]int{0, 1, 2})
			rs = append(rs, netfault.Scenario{Net: nt, Coords: cs, Fault: f, Seed: sd + uint64(i),
				Warm: 2 * time.Second, Hold: hold(t), After: 2 * time.Second}.Run(t))
		})
	}
	t.Logf("raft summary (fault | leader changes | longest gap between acknowledged writes | operations | violations):\n%s", netfault.Summary(rs))
}
