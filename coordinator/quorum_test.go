package coordinator_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// TestRaftQuorumLostSaysSo: with two of three Raft coordinators stopped,
// an admin write through the SDK and through the CLI ends with the
// survivor's own statement that it has no quorum, not with "no
// coordinator reachable" or a bare timeout.
func TestRaftQuorumLostSaysSo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ms := startRaftCluster(t, ctx, 3)
	var addrs []string
	for _, m := range ms {
		addrs = append(addrs, m.client)
	}
	// The leader dies with one follower: the survivor last observed a
	// leader that is dead, and must not name it.
	c0, err := adminclient.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	lead := waitServingLeader(t, ctx, c0, "")
	c0.Close()
	var survivor *raftMember
	for _, m := range ms {
		if survivor == nil && adminapi.HostPort(lead.GetLeaderAddress()) != m.client {
			survivor = m
			continue
		}
		m.p.group(syscall.SIGKILL)
		<-m.p.done
	}
	const want = "answers but has no quorum: 2 of 3 voters unreachable"
	var last error
	// The survivor sees the others unreachable once its transport's
	// connections to them fail.
	defer func() {
		if t.Failed() {
			t.Logf("the survivor's last answer: %v", last)
		}
	}()
	testutil.WaitFor(t, 30*time.Second, "the survivor's NOT_LEADER naming the lost quorum", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		defer ccancel()
		_, err := survivor.admin.CreateDatabase(cctx, &adminv1.CreateDatabaseRequest{Name: "q"})
		last = err
		return err != nil && strings.Contains(err.Error(), want)
	})

	c, err := adminclient.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	defer wcancel()
	err = c.Admin(wctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "q"})
		return err
	})
	if de, ok := errors.AsType[*adminclient.DeadlineError](err); !ok || de.LastAddress != survivor.client || !strings.Contains(err.Error(), want) {
		t.Fatalf("SDK write: %v, want a deadline error with the survivor's %q", err, want)
	}

	out, err := exec.CommandContext(ctx, testutil.Binary(t, "metaplane"), "admin", "--bootstrap-servers", strings.Join(addrs, ","),
		"--timeout", "3s", "create-database", "q").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), want) || !strings.Contains(string(out), survivor.client) {
		t.Fatalf("CLI write: %v\n%s\nwant exit 1 naming %s and %q", err, out, survivor.client, want)
	}
}
