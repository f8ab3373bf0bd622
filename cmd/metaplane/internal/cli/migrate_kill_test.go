package cli

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaplane/metaplane/internal/testutil"
)

// liveProc starts `metaplane zk-to-raft-live-migrate` as a process with
// the test hook hold (testHoldEnv; "" for none) and returns it with a
// channel of its stderr lines (closed at EOF) and its whole stderr.
func liveProc(t *testing.T, hold string, args ...string) (*exec.Cmd, <-chan string, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(testutil.Binary(t, "metaplane"), append([]string{"zk-to-raft-live-migrate", "--no-env"}, args...)...)
	cmd.Env = append(os.Environ(), testHoldEnv+"="+hold)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 1024)
	all := &strings.Builder{}
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return cmd, lines, all
}

// killAt waits for a stderr line of cmd containing want, then SIGKILLs it.
func killAt(t *testing.T, cmd *exec.Cmd, lines <-chan string, all *strings.Builder, want string) {
	t.Helper()
	timeout := time.After(90 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("the tool ended before %q:\n%s", want, all.String())
			}
			all.WriteString(l + "\n")
			if strings.Contains(l, want) {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				cmd.Wait()
				return
			}
		case <-timeout:
			t.Fatalf("no %q on the tool's stderr within 90s:\n%s", want, all.String())
		}
	}
}

// TestLiveMigrateSurvivesSIGKILL kills zk-to-raft-live-migrate (a real
// process, its plugins dying with it) mid-copy and at the final scan, with
// a real ZooKeeper coordinator on the source: the source serves writes
// throughout the first kill and again once the second kill's session
// ended (the fence was an ephemeral node of the tool's session); the next
// run takes the dead run's marker over, and a last run completes and
// validates.
func TestLiveMigrateSurvivesSIGKILL(t *testing.T) {
	srv, bin, dir := migrationSetup(t)
	const root = "/kill-test"
	zkCfg, raftCfg := liveConfigs(t, srv, bin, dir, root) // each run below sets its own coordinator.raft.dir
	// Each rerun goes into the target the run before it was killed on:
	// the dead run's partial copy is emptied (its owner goes with its
	// session, a short one here) and taken over.
	run := func(n string) []string {
		return []string{"--from", zkCfg, "--to", raftCfg, "--to-set", "coordinator.raft.dir=" + filepath.Join(dir, "raft-"+n),
			"--to-set", "coordinator.tablet-server.session-timeout=3s"}
	}
	bs, _ := coordinatorProc(t, dir, "--config", zkCfg)
	mustCLI(t, "admin", "create-database", "shop", bs)
	mustCLI(t, "admin", "create-table", "shop.orders", "--column", "id:BIGINT", "--primary-key", "id", "--buckets", "3", bs)

	conn, _, err := zk.Connect(srv.Addrs(), 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exists := func(p string) bool {
		ok, _, err := conn.Exists(root + p)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	gone := func(p string) {
		t.Helper()
		testutil.WaitFor(t, 60*time.Second, p+" is gone with the killed tool's session", func() bool { return !exists(p) })
	}

	// Killed mid-copy: the source was never fenced and serves on.
	cmd, lines, all := liveProc(t, "after-round-1", run("1")...)
	killAt(t, cmd, lines, all, "holding")
	if exists("/metaplane-migration/fence") || !exists("/metaplane-migration") {
		t.Fatalf("after a kill mid-copy: fence %v (want none), marker %v (want left)", exists("/metaplane-migration/fence"), exists("/metaplane-migration"))
	}
	mustCLI(t, "admin", "create-database", "after_kill_1", bs, "--timeout=10s")
	gone("/metaplane-migration/owner")

	// Killed after the fence, at the final scan: the source is fenced until
	// the tool's session ends, then its coordinator leads and writes again.
	cmd, lines, all = liveProc(t, "before-final", run("1")...)
	killAt(t, cmd, lines, all, "holding")
	if !strings.Contains(all.String(), "left by a tool that died") || !strings.Contains(all.String(), "emptying it and taking over") {
		t.Errorf("the second run did not say it took the dead run's markers (source and target) over:\n%s", all.String())
	}
	if !strings.Contains(all.String(), "source fenced") {
		t.Fatalf("the second run was not killed after the fence:\n%s", all.String())
	}
	gone("/metaplane-migration/fence")
	testutil.WaitFor(t, 60*time.Second, "the source's coordinator writes again", func() bool {
		_, _, code := runCLI(t, "admin", "create-database", "after_kill_2", bs, "--timeout=3s")
		return code == ExitOK
	})
	gone("/metaplane-migration/owner")

	// A rerun completes and validates, and leaves the source fenced for
	// good (a persistent fence).
	cmd, lines, all = liveProc(t, "", run("1")...)
	for l := range lines {
		all.WriteString(l + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the rerun: %v\n%s", err, all.String())
	}
	if !strings.Contains(all.String(), "validated:") || !strings.Contains(all.String(), "left by a tool that died") || !strings.Contains(all.String(), "emptying it and taking over") {
		t.Errorf("the rerun's progress:\n%s", all.String())
	}
	_, st, err := conn.Get(root + "/metaplane-migration/fence")
	if err != nil || st.EphemeralOwner != 0 {
		t.Errorf("after the rerun the source's fence: %+v %v, want a persistent node", st, err)
	}
	// A Raft coordinator on the rerun's copy serves what the source took
	// between the kills.
	rbs, _ := coordinatorProc(t, dir, "--config", raftCfg, "-D", "coordinator.raft.dir="+filepath.Join(dir, "raft-1"))
	dbs := mustCLI(t, "admin", "list-databases", rbs)
	for _, db := range []string{"shop", "after_kill_1", "after_kill_2"} {
		if !strings.Contains(dbs, db+"\n") {
			t.Errorf("database %s is not on Raft after the rerun: %q", db, dbs)
		}
	}
}
