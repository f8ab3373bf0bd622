package raft

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/conformance"
	"github.com/metaplane/metaplane/core"
)

// await polls cond every 10 ms until it holds, for at most d.
func await(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// TestProcessLinearizableUnderKills: the conformance register history on
// three voter processes, while the leader's process is SIGKILLed (twice)
// and a follower's once, each restarted by its host; calls cut off by a
// kill are writes of unknown outcome in the history, which porcupine must
// find linearizable. The same history with reads made deliberately stale
// must fail (the negative control, every run).
func TestProcessLinearizableUnderKills(t *testing.T) {
	v := startProcs(t, 3)
	clients := []core.MetadataBackend{v.client(0), v.client(1), v.client(2), v.client(0)}
	status := clients[:3]
	kill := func(leader bool) conformance.Fault {
		name := "SIGKILL of a follower"
		if leader {
			name = "SIGKILL of the leader"
		}
		return conformance.Fault{Name: name, Inject: func(ctx context.Context) error {
			var l int
			if err := await(ctx, 20*time.Second, "a leader", func() bool { l = v.leader(status); return l >= 0 }); err != nil {
				return err
			}
			i := l
			if !leader {
				i = (l + 1) % 3
			}
			pid := v.signal(i, syscall.SIGKILL)
			t.Logf("%s: voter %d (pid %d)", name, i+1, pid)
			return await(ctx, 30*time.Second, fmt.Sprintf("voter %d to be restarted", i+1), func() bool {
				p := v.plugins[i].Pid()
				return p != 0 && p != pid
			})
		}}
	}
	conformance.RunLinearizableUnderFaults(t, conformance.FaultHistory{
		Clients: clients,
		Faults:  []conformance.Fault{kill(true), kill(false), kill(true)},
	})
}

// TestLinearizableUnderPartitionedLeader: the conformance register
// history on three members, each behind a loopback proxy in front of its
// Raft port, while the leader is cut off from every inbound message until
// another member leads, then healed (twice): clients of the cut-off
// leader go on calling it meanwhile. The same history with reads made
// deliberately stale must fail (the check's negative control on the real
// backend and its faults, every run).
func TestLinearizableUnderPartitionedLeader(t *testing.T) {
	c, proxies := startProxiedCluster(t)
	c.waitLeader()
	clients := []core.MetadataBackend{c.client(0), c.client(1), c.client(2), c.client(0)}
	partition := conformance.Fault{Name: "partitioned leader", Inject: func(ctx context.Context) error {
		var old int
		// After a heal the cut-off member may call an election.
		if err := await(ctx, 20*time.Second, "a leader to cut off", func() bool { old = c.leader(); return old >= 0 }); err != nil {
			return err
		}
		proxies[old].setCut(true)
		defer proxies[old].setCut(false)
		cut := time.Now()
		err := await(ctx, 20*time.Second, "another member to lead", func() bool {
			for i, p := range c.members {
				if st, err := p.Status(); i != old && err == nil && st.Role == core.RoleLeader {
					return true
				}
			}
			return false
		})
		t.Logf("member %d cut off; another leads after %v", old+1, time.Since(cut))
		return err
	}}
	conformance.RunLinearizableUnderFaults(t, conformance.FaultHistory{
		Clients: clients,
		Faults:  []conformance.Fault{partition, partition},
	})
}
