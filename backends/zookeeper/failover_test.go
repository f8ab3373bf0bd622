package zookeeper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/zktest"
)

// TestEnsembleMemberKilledSessionMoves: the ensemble member a leader's
// client is connected to is SIGKILLed. As docs/zookeeper.md says, the
// client moves to another member within the granted session timeout and
// keeps its session: same session id, its ephemeral node and its
// leadership intact, and its fenced writes go on. The bound is the
// documented one (the session would expire past it), computed from the
// granted timeout, not a speed target.
func TestEnsembleMemberKilledSessionMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-server ensemble; skipped with -short")
	}
	ens := zktest.StartEnsemble(t, 3)
	c := open(t, Options{
		Address: ens.ConnectString(), Root: "/failover",
		SessionTimeout: 6 * time.Second, ConnectionTimeout: 20 * time.Second,
		RetryWait: 100 * time.Millisecond, MaxRetryAttempts: 5,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := c.Campaign(ctx, cand("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := core.Create(ctx, c, "/eph", []byte("e"), core.CreateOptions{Mode: core.Ephemeral, Fence: l.Fence()}); err != nil {
		t.Fatal(err)
	}
	info := c.Session()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Details["session_timeout"] != info.Timeout.String() {
		t.Fatalf("status session_timeout %s, want the granted %v", st.Details["session_timeout"], info.Timeout)
	}
	killed := st.Details["server"]
	victim := -1
	for i, a := range ens.Addrs() {
		if a == killed {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("connected to %q, not a member of %v", killed, ens.Addrs())
	}
	ens.Kill(victim)
	at := time.Now()
	testutil.WaitFor(t, info.Timeout, "the client on another member, in its session", func() bool {
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		defer scancel()
		s, err := c.Status(sctx)
		return err == nil && s.Details["server"] != killed && c.Session().State == core.SessionConnected
	})
	t.Logf("moved from member %d to another %v after its SIGKILL (granted session timeout %v)", victim+1, time.Since(at), info.Timeout)
	if got := c.Session().ID; got != info.ID {
		t.Fatalf("session %x became %x: it should survive the move", info.ID, got)
	}
	notLost(t, l, "the connected member was killed")
	for {
		_, _, err := core.Create(ctx, c, "/after", nil, core.CreateOptions{Fence: l.Fence()})
		if err == nil || errors.Is(err, core.ErrNodeExists) {
			break
		}
		if !errors.Is(err, core.ErrUnavailable) || ctx.Err() != nil {
			t.Fatalf("fenced write after the move: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // back off: a lost answer is repeated idempotently
	}
	n, err := core.Get(ctx, c, "/eph")
	if err != nil || n.Stat.EphemeralOwner != info.ID {
		t.Fatalf("ephemeral after the move: %+v, %v; want owned by session %x", n, err, info.ID)
	}
}
