package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
)

// memoryFaults returns four clients of a fresh memory store and faults
// that fail a client's next write (so a write of unknown outcome is
// recorded) and delay every call of another.
func memoryFaults(t *testing.T) ([]core.MetadataBackend, []conformance.Fault) {
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	cs := make([]core.MetadataBackend, 4)
	for i := range cs {
		c := s.NewClient(core.ClientOptions{Name: fmt.Sprintf("c%d", i)})
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	fi := func(i int) core.FaultInjector { return cs[i].(core.FaultInjector) }
	return cs, []conformance.Fault{
		{Name: "failed write", Inject: func(context.Context) error {
			fi(1).FailNextWrite(fmt.Errorf("%w: injected", core.ErrUnavailable))
			return nil
		}},
		{Name: "latency", Inject: func(context.Context) error { fi(2).SetLatency(2 * time.Millisecond); return nil }},
		{Name: "no latency", Inject: func(context.Context) error { fi(2).SetLatency(0); return nil }},
	}
}

// TestCheckLinearizableUnderFaults: the memory backend's history under
// its injected faults is linearizable, and failed writes are in it as
// writes of unknown outcome.
func TestCheckLinearizableUnderFaults(t *testing.T) {
	cs, faults := memoryFaults(t)
	rep, err := conformance.CheckLinearizableUnderFaults(context.Background(), conformance.FaultHistory{Clients: cs, Faults: faults})
	if err != nil {
		t.Fatalf("%v (%+v)", err, rep)
	}
	if rep.Pending == 0 {
		t.Fatalf("no write of unknown outcome in the history: %+v", rep)
	}
	t.Logf("%+v", rep)
}

// TestCheckLinearizableUnderFaultsStaleReads is the check's negative
// control: with reads made stale it fails with ErrNotLinearizable, in
// every run.
func TestCheckLinearizableUnderFaultsStaleReads(t *testing.T) {
	for run := 0; run < 3; run++ {
		cs, faults := memoryFaults(t)
		rep, err := conformance.CheckLinearizableUnderFaults(context.Background(), conformance.FaultHistory{Clients: cs, Faults: faults, StaleReads: true})
		if !errors.Is(err, conformance.ErrNotLinearizable) {
			t.Fatalf("run %d: stale reads: got %v (%+v), want ErrNotLinearizable", run, err, rep)
		}
	}
}
