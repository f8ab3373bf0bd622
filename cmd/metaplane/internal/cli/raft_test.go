package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metaplane/metaplane/internal/testutil"
)

// TestRaftGolden: the raft verbs' help and usage errors, which fail
// before they dial.
func TestRaftGolden(t *testing.T) {
	const bs = "--bootstrap-servers=127.0.0.1:1"
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"help-raft", []string{"raft", "--help"}, ExitOK},
		{"help-raft-status", []string{"raft", "status", "--help"}, ExitOK},
		{"no-raft-verb", []string{"raft"}, ExitUsage},
		{"raft-count-without-watch", []string{"raft", "status", "--count", "2", bs}, ExitUsage},
		{"json-raft-bad-interval", []string{"raft", "status", "--watch", "--interval", "0s", "--json", bs}, ExitUsage},
		{"json-raft-zero-interval-ms", []string{"raft", "status", "--watch", "--interval", "0", "--json", bs}, ExitUsage},
		{"raft-bad-interval-word", []string{"raft", "status", "--watch", "--interval", "soon", bs}, ExitUsage},
		{"raft-leader-extra", []string{"raft", "leader", "extra", bs}, ExitUsage},
		{"raft-can-stop-no-id", []string{"raft", "can-stop", bs}, ExitUsage},
		{"raft-add-voter-no-address", []string{"raft", "add-voter", "--id", "4", bs}, ExitUsage},
		{"raft-remove-voter-bad-id", []string{"raft", "remove-voter", "--id", "x", bs}, ExitUsage},
		{"help-raft-snapshot", []string{"raft", "snapshot", "--help"}, ExitOK},
		{"raft-snapshot-status-missing", []string{"raft", "snapshot", "status", "testdata/cli/no-such-snapshot.jsonl"}, ExitFailure},
		{"raft-snapshot-save-no-file", []string{"raft", "snapshot", "save", bs}, ExitUsage},
		{"raft-snapshot-restore-no-data-dir", []string{"raft", "snapshot", "restore", "testdata/cli/no-such-snapshot.jsonl", "--no-env"}, ExitUsage},
		{"raft-unsafe-recover-no-flag", []string{"raft", "unsafe-recover", "--data-dir", "/nonexistent", "--no-env"}, ExitUsage},
		{"json-raft-unsafe-recover-no-flag", []string{"raft", "unsafe-recover", "--data-dir", "/nonexistent", "--no-env", "--json"}, ExitUsage},
		{"raft-unsafe-recover-no-state", []string{"raft", "unsafe-recover", "--i-understand-data-loss", "--data-dir", "/nonexistent", "--no-env"}, ExitFailure},
		{"raft-unsafe-recover-bad-report", []string{"raft", "unsafe-recover", "--dry-run", "--data-dir", "/nonexistent", "--no-env", "--survivor-report", "testdata/cli/snapshot.jsonl"}, ExitUsage},
		{"raft-unsafe-recover-help", []string{"raft", "unsafe-recover", "--help"}, ExitOK},
		{"raft-bootstrap-no-data-dir", []string{"raft", "bootstrap", "--no-env"}, ExitUsage},
		{"raft-snapshot-status", []string{"raft", "snapshot", "status", "testdata/cli/snapshot.jsonl"}, ExitOK},
		{"json-raft-snapshot-status", []string{"raft", "snapshot", "inspect", "testdata/cli/snapshot.jsonl", "--json"}, ExitOK},
		{"raft-snapshot-status-corrupt", []string{"raft", "snapshot", "status", "testdata/cli/snapshot-corrupt.jsonl"}, ExitFailure},
		{"json-raft-snapshot-restore-corrupt", []string{"raft", "snapshot", "restore", "testdata/cli/snapshot-corrupt.jsonl", "--data-dir", "testdata/cli/never-created", "--no-env", "--json"}, ExitFailure},
		{"json-raft-snapshot-status-truncated", []string{"raft", "snapshot", "status", "testdata/cli/snapshot-truncated.jsonl", "--json"}, ExitFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			compareGolden(t, filepath.Join("testdata", "cli", tt.name+".golden"), transcript(code, stdout, stderr))
		})
	}
}

// raftProc is a coordinator process of the cluster under test.
type raftProc struct {
	id     string
	client string
	raft   string // its Raft host:port
	dir    string // its coordinator.raft.dir (a new one when empty)
	cmd    *exec.Cmd
	done   chan struct{}
}

func (p *raftProc) kill() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	// The Raft plugin, in the coordinator's process group, is killed with
	// it but may exit a moment later: wait (bounded) until it has released
	// the data directory's NodeHost lock, as an offline verb would need.
	lock := filepath.Join(p.dir, "nodehost", "LOCK")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(lock); err != nil {
			return
		}
		if l, err := vfs.Default.Lock(lock); err == nil {
			l.Close()
			return
		}
	}
}

// startRaftCoordinators starts n coordinators on the Raft backend as real
// processes (each with its plugin), on loopback.
func startRaftCoordinators(t *testing.T, n int) []*raftProc {
	t.Helper()
	clients, voters := make([]string, n), make([]string, n)
	raftPorts := make([]int, n)
	for i := 0; i < n; i++ {
		clients[i] = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
		raftPorts[i] = testutil.FreePort(t)
		voters[i] = fmt.Sprintf("%d@127.0.0.1:%d", i+1, raftPorts[i])
	}
	var ps []*raftProc
	var boot [][]string
	for i := 0; i < n; i++ {
		p := &raftProc{id: strconv.Itoa(i + 1), client: clients[i], raft: fmt.Sprintf("127.0.0.1:%d", raftPorts[i]),
			dir: filepath.Join(t.TempDir(), "raft")}
		boot = append(boot, []string{"--no-env",
			"-D", "coordinator.raft.voters=" + strings.Join(voters, ","), "-D", "coordinator.raft.node.id=" + p.id,
			"-D", "coordinator.raft.port=" + strconv.Itoa(raftPorts[i]), "-D", "coordinator.raft.dir=" + p.dir})
		ps = append(ps, p)
	}
	if n > 1 {
		// Every member's directory is formatted before any starts, as an
		// operator does before a multi-voter cluster's first start.
		testutil.RaftBootstrap(t, testutil.Binary(t, "metaplane"), boot...)
	}
	for i, p := range ps {
		spawnRaftProc(t, p, strings.Join(clients, ","), strings.Join(voters, ","), raftPorts[i])
	}
	return ps
}

// spawnRaftProc starts p as a coordinator process on the Raft backend
// (with its plugin) with the given seeds and voters and any extra -D
// settings, killed at the end of the test.
func spawnRaftProc(t *testing.T, p *raftProc, seeds, voters string, raftPort int, extra ...string) {
	t.Helper()
	bin := testutil.Binary(t, "metaplane")
	pluginDir := filepath.Dir(testutil.Binary(t, "metaplane-backend-raft"))
	p.done = make(chan struct{})
	if p.dir == "" {
		p.dir = filepath.Join(t.TempDir(), "raft")
	}
	args := []string{"coordinator", "--no-env", "-D", "metadata.backend.plugin.dir=" + pluginDir,
		"-D", "metrics.address=127.0.0.1:0", "-D", "bind.listeners=CLIENT://" + p.client, "-D", "coordinator.seed.nodes=" + seeds,
		"-D", "coordinator.raft.voters=" + voters, "-D", "coordinator.raft.node.id=" + p.id,
		"-D", "coordinator.raft.port=" + strconv.Itoa(raftPort),
		"-D", "coordinator.raft.dir=" + p.dir}
	for _, e := range extra {
		args = append(args, "-D", e)
	}
	p.cmd = exec.Command(bin, args...)
	out := &testutil.SyncBuffer{}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("---- coordinator %s ----\n%s", p.id, out.String())
		}
	})
}

func bootstrapOf(ps []*raftProc) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.client)
	}
	return "--bootstrap-servers=" + strings.Join(s, ",")
}

// TestRaftVerbs runs `raft status` and `raft leader` against a
// three-voter cluster of real coordinator processes: healthy, after the
// leader's SIGKILL (the new leader is named, never the dead one), and
// after a second SIGKILL (no quorum: exit 1, said plainly).
func TestRaftVerbs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real coordinator processes")
	}
	ps := startRaftCoordinators(t, 3)
	bs := bootstrapOf(ps)

	var st raftReport
	testutil.WaitFor(t, 60*time.Second, "raft status healthy with every voter reachable", func() bool {
		stdout, _, code := runCLI(t, "raft", "status", "--json", bs)
		st = raftReport{}
		if code != ExitOK || json.Unmarshal([]byte(stdout), &st) != nil || st.VotersReachable != 3 {
			return false
		}
		// Every member has answered for itself at the leader's term: a
		// member that has just joined the term may not have yet.
		for _, m := range st.Members {
			if m.Coordinator == "" || m.Term != st.Term {
				return false
			}
		}
		return true
	})
	if !st.Healthy || st.View != "LEADER" || st.Voters != 3 || st.ClusterID == "" || st.Term <= 0 || len(st.Members) != 3 || len(st.Answers) != 3 {
		t.Fatalf("status: %+v", st)
	}
	leaders := 0
	for _, m := range st.Members {
		if m.Leader {
			leaders++
			if m.ID != st.LeaderID {
				t.Errorf("the row marked leader is %s, the report names %s", m.ID, st.LeaderID)
			}
		}
		if m.Coordinator == "" || m.Term != st.Term || m.Kind != "voter" {
			t.Errorf("member %+v: want its own answer (coordinator, term %d), a voter", m, st.Term)
		}
	}
	if leaders != 1 {
		t.Errorf("%d rows marked leader, want 1", leaders)
	}
	// The table marks the leader and says the quorum holds.
	stdout, stderr, code := runCLI(t, "raft", "status", bs)
	if code != ExitOK || !strings.Contains(stdout, st.LeaderID+"*") || !strings.Contains(stdout, "3 of 3 voters reachable: quorum held") {
		t.Errorf("status text: exit %d\n%s%s", code, stdout, stderr)
	}
	// --watch --count: two rounds.
	stdout, _, code = runCLI(t, "raft", "status", "--watch", "--interval", "10ms", "--count", "2", bs)
	if code != ExitOK || strings.Count(stdout, "quorum held") != 2 {
		t.Errorf("status --watch --count 2: exit %d\n%s", code, stdout)
	}
	var lr leaderReport
	stdout, stderr, code = runCLI(t, "raft", "leader", "--json", bs)
	if code != ExitOK || json.Unmarshal([]byte(stdout), &lr) != nil || lr.LeaderID != st.LeaderID || lr.Agreeing != 3 || lr.Answering != 3 {
		t.Fatalf("leader: exit %d %+v\n%s%s", code, lr, stdout, stderr)
	}

	// transfer-leader: refusals change nothing; a transfer to a named
	// voter and one to the most caught-up voter move the leadership, and
	// the coordinator leadership with it, at a higher term.
	for _, bad := range []struct{ to, says string }{
		{st.LeaderID, "leads already"},
		{"9", "not in the membership"},
	} {
		stdout, stderr, code := runCLI(t, "raft", "transfer-leader", "--to", bad.to, "--json", bs)
		var je jsonError
		if code != ExitFailure || json.Unmarshal([]byte(stderr), &je) != nil || je.Code != "INVALID_ARGUMENT" || !strings.Contains(je.Error, bad.says) {
			t.Errorf("transfer-leader --to %s: exit %d, stdout %q, stderr %q; want INVALID_ARGUMENT %q", bad.to, code, stdout, stderr, bad.says)
		}
	}
	if _, stderr, code := runCLI(t, "raft", "transfer-leader", "--to", "x", bs); code != ExitUsage {
		t.Errorf("transfer-leader --to x: exit %d (%s), want a usage error", code, stderr)
	}
	if stdout, _, code := runCLI(t, "raft", "leader", "--json", bs); code != ExitOK || !strings.Contains(stdout, `"leader_id": "`+st.LeaderID+`"`) {
		t.Fatalf("the leader moved after refused transfers: %s", stdout)
	}
	target := "1"
	if st.LeaderID == "1" {
		target = "2"
	}
	var tr transferReport
	// A follower counts as caught up once it has reported its progress
	// (with its coordinator's first session renewal); until then the
	// verb waits, within --wait.
	stdout, stderr, code = runCLI(t, "raft", "transfer-leader", "--to", target, "--wait", "60s", "--json", bs)
	if code != ExitOK || json.Unmarshal([]byte(stdout), &tr) != nil {
		t.Fatalf("transfer-leader --to %s: exit %d\n%s%s", target, code, stdout, stderr)
	}
	if tr.LeaderID != target || tr.PreviousLeaderID != st.LeaderID || tr.Term <= st.Term || tr.Address == "" {
		t.Fatalf("transfer to %s: %+v (was leader %s at term %d)", target, tr, st.LeaderID, st.Term)
	}
	testutil.WaitFor(t, 30*time.Second, "the coordinator leadership on member "+target, func() bool {
		stdout, _, code := runCLI(t, "admin", "leader", "--json", bs)
		return code == ExitOK && strings.Contains(stdout, `"leader_address": "`+tr.Address+`"`)
	})
	prev := tr
	// The new leader has no progress reports yet: the verb waits for one.
	tr = transferReport{}
	stdout, stderr, code = runCLI(t, "raft", "transfer-leader", "--wait", "60s", "--json", bs)
	if code != ExitOK || json.Unmarshal([]byte(stdout), &tr) != nil {
		t.Fatalf("transfer-leader: exit %d\n%s%s", code, stdout, stderr)
	}
	if tr.LeaderID == prev.LeaderID || tr.PreviousLeaderID != prev.LeaderID || tr.Term <= prev.Term {
		t.Fatalf("transfer to the most caught-up voter: %+v (after %+v)", tr, prev)
	}
	testutil.WaitFor(t, 30*time.Second, "raft status naming the new leader", func() bool {
		stdout, _, code := runCLI(t, "raft", "status", "--json", bs)
		st = raftReport{}
		return code == ExitOK && json.Unmarshal([]byte(stdout), &st) == nil && st.LeaderID == tr.LeaderID && st.VotersReachable == 3
	})

	// Every voter caught up: one may fail, so any one may stop.
	testutil.WaitFor(t, 30*time.Second, "raft status with every voter caught up", func() bool {
		stdout, _, code := runCLI(t, "raft", "status", "--json", bs)
		st = raftReport{}
		return code == ExitOK && json.Unmarshal([]byte(stdout), &st) == nil && st.VotersCaughtUp == 3
	})
	if st.FailureTolerance != 1 {
		t.Errorf("failure tolerance of three caught-up voters: %d, want 1", st.FailureTolerance)
	}
	for _, p := range ps {
		var cs canStopReport
		stdout, stderr, code := runCLI(t, "raft", "can-stop", "--id", p.id, "--json", bs)
		if code != ExitOK || json.Unmarshal([]byte(stdout), &cs) != nil || !cs.CanStop || cs.CaughtUpAfter != 2 || cs.Leader != (p.id == st.LeaderID) {
			t.Errorf("can-stop --id %s of three caught-up voters: exit %d\n%s%s", p.id, code, stdout, stderr)
		}
	}

	// SIGKILL the leader. Every answer of `raft leader` from now on names a
	// live member or says unknown; never the dead one.
	var dead *raftProc
	var alive []*raftProc
	for _, p := range ps {
		if p.id == st.LeaderID {
			dead = p
		} else {
			alive = append(alive, p)
		}
	}
	dead.kill()
	testutil.WaitFor(t, 60*time.Second, "a new leader named by raft leader", func() bool {
		stdout, stderr, code := runCLI(t, "raft", "leader", "--json", bs)
		if code != ExitOK {
			if !strings.Contains(stderr, "leader unknown") {
				t.Fatalf("raft leader without a leader: exit %d %s", code, stderr)
			}
			return false
		}
		lr = leaderReport{}
		if err := json.Unmarshal([]byte(stdout), &lr); err != nil {
			t.Fatalf("raft leader --json: %v: %s", err, stdout)
		}
		if lr.LeaderID == dead.id {
			t.Fatalf("raft leader names the dead member %s: %s", dead.id, stdout)
		}
		return lr.Agreeing == 2 && lr.Answering == 2
	})
	testutil.WaitFor(t, 30*time.Second, "raft status with the dead member unreachable", func() bool {
		stdout, _, code := runCLI(t, "raft", "status", "--json", bs)
		st = raftReport{}
		if code != ExitOK || json.Unmarshal([]byte(stdout), &st) != nil {
			return false
		}
		for _, m := range st.Members {
			if m.ID == dead.id {
				return !m.Reachable && m.Coordinator == ""
			}
		}
		return false
	})
	if st.LeaderID != lr.LeaderID || st.VotersReachable != 2 || !st.Healthy {
		t.Errorf("status after the leader's death: %+v (leader verb said %s)", st, lr.LeaderID)
	}
	// With one voter down none more may fail: a live member may not stop,
	// the dead one "may" (nothing changes).
	if st.FailureTolerance != 0 {
		t.Errorf("failure tolerance with one of three voters down: %d, want 0", st.FailureTolerance)
	}
	for _, p := range alive {
		stdout, stderr, code := runCLI(t, "raft", "can-stop", "--id", p.id, bs)
		if code != ExitFailure || !strings.Contains(stdout, "member "+p.id+" cannot stop now") || !strings.Contains(stdout, "not caught up: ") || !strings.Contains(stdout, dead.id+": ") {
			t.Errorf("can-stop --id %s with member %s down: exit %d\n%s%s", p.id, dead.id, code, stdout, stderr)
		}
		_, stderr, code = runCLI(t, "raft", "can-stop", "--id", p.id, "--json", bs)
		var je jsonError
		if code != ExitFailure || json.Unmarshal([]byte(stderr), &je) != nil || je.Code != codeCannotStop {
			t.Errorf("can-stop --id %s --json with member %s down: exit %d, stderr %q", p.id, dead.id, code, stderr)
		}
	}
	if stdout, stderr, code := runCLI(t, "raft", "can-stop", "--id", dead.id, bs); code != ExitOK {
		t.Errorf("can-stop --id %s (down already): exit %d\n%s%s", dead.id, code, stdout, stderr)
	}

	// A second SIGKILL: no quorum. status exits 1 and says so; leader says
	// unknown.
	for _, p := range alive {
		if p.id == lr.LeaderID {
			p.kill()
		}
	}
	testutil.WaitFor(t, 30*time.Second, "raft status reporting no quorum", func() bool {
		_, stderr, code := runCLI(t, "raft", "status", bs)
		return code == ExitFailure && strings.Contains(stderr, "2 of 3 voters unreachable: no quorum")
	})
	stdout, stderr, code = runCLI(t, "raft", "status", "--json", bs)
	var je jsonError
	if code != ExitFailure || json.Unmarshal([]byte(stdout), &st) != nil || st.Healthy || json.Unmarshal([]byte(stderr), &je) != nil || je.Code != codeNoQuorum {
		t.Errorf("status --json without a quorum: exit %d\n%s%s", code, stdout, stderr)
	}
	testutil.WaitFor(t, 30*time.Second, "raft leader saying unknown", func() bool {
		stdout, stderr, code := runCLI(t, "raft", "leader", bs)
		if code == ExitOK {
			if strings.Contains(stdout, "leader "+dead.id+" ") || strings.Contains(stdout, "leader "+lr.LeaderID+" ") {
				t.Fatalf("raft leader names a dead member: %s", stdout)
			}
			return false
		}
		return code == ExitFailure && strings.Contains(stderr, "leader unknown")
	})
}

// TestRaftBootstrapSkipFormatted: `raft bootstrap` formats an empty
// directory and refuses it once formatted; with --skip-formatted the
// formatted directory is left as it is (exit 0, said so), and a non-empty
// directory that holds no formatted member is still refused.
func TestRaftBootstrapSkipFormatted(t *testing.T) {
	voters := fmt.Sprintf("1@127.0.0.1:%d,2@127.0.0.1:%d,3@127.0.0.1:%d", testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t))
	dir := filepath.Join(t.TempDir(), "raft")
	args := []string{"raft", "bootstrap", "--no-env", "--data-dir", dir, "--voters", voters, "--node-id", "2"}
	if stdout, stderr, code := runCLI(t, args...); code != ExitOK || !strings.Contains(stdout, "as member 2 of new cluster") {
		t.Fatalf("bootstrap: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, stderr, code := runCLI(t, args...); code != ExitFailure || !strings.Contains(stderr, "is not empty") {
		t.Fatalf("bootstrap of a formatted dir: exit %d, want 1 (not empty)\n%s", code, stderr)
	}
	stdout, stderr, code := runCLI(t, append(args, "--skip-formatted", "--json")...)
	var rep struct { // the --json answer's fields this test reads
		Skipped   bool   `json:"skipped"`
		ClusterID string `json:"cluster_id"`
	}
	if code != ExitOK || json.Unmarshal([]byte(stdout), &rep) != nil || !rep.Skipped || rep.ClusterID == "" {
		t.Fatalf("bootstrap --skip-formatted of a formatted dir: exit %d\n%s%s", code, stdout, stderr)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "stray"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runCLI(t, "raft", "bootstrap", "--no-env", "--data-dir", other, "--voters", voters, "--node-id", "2", "--skip-formatted"); code != ExitFailure || !strings.Contains(stderr, "is not empty") {
		t.Fatalf("bootstrap --skip-formatted of an unformatted non-empty dir: exit %d, want 1\n%s", code, stderr)
	}
}
