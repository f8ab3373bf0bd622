package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/migrate"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// dbWriter creates databases db0, db1, ... through client until stopped,
// keeping the names of those acknowledged.
type dbWriter struct {
	mu    sync.Mutex
	acked []string
	stop  chan struct{}
	done  chan struct{}
}

func startDBWriter(client *adminclient.Client, prefix string) *dbWriter {
	w := &dbWriter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			name := fmt.Sprintf("%s%d", prefix, i)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := client.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
				_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: name})
				return err
			})
			cancel()
			if err == nil {
				w.mu.Lock()
				w.acked = append(w.acked, name)
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *dbWriter) ackedNames() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.acked...)
}

func (w *dbWriter) halt() []string {
	close(w.stop)
	<-w.done
	return w.ackedNames()
}

func listDatabases(t *testing.T, addr string) map[string]bool {
	t.Helper()
	client, err := adminclient.NewClient([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var names map[string]bool
	testutil.WaitFor(t, 30*time.Second, "ListDatabases on "+addr, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return client.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
			resp, err := a.ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
			if err == nil {
				names = map[string]bool{}
				for _, n := range resp.Names {
					names[n] = true
				}
			}
			return err
		}) == nil
	})
	return names
}

func waitRaftHealthy(t *testing.T, bs string, voters int) raftReport {
	t.Helper()
	var st raftReport
	testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("raft status healthy with %d voters reachable", voters), func() bool {
		stdout, _, code := runCLI(t, "raft", "status", "--json", bs)
		st = raftReport{}
		return code == ExitOK && json.Unmarshal([]byte(stdout), &st) == nil && st.Voters == voters && st.VotersReachable == voters
	})
	return st
}

// wantCLIError runs args and wants exit code and, in the --json error
// object, code.
func wantCLIError(t *testing.T, exit int, code string, args ...string) {
	t.Helper()
	stdout, stderr, got := runCLI(t, args...)
	var je jsonError
	if got != exit || json.Unmarshal([]byte(lastLine(stderr)), &je) != nil || je.Code != code {
		t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d, code %s", args, got, stdout, stderr, exit, code)
	}
}

// TestRaftSnapshotAndRecover, on a three-voter cluster of real coordinator
// processes: `raft snapshot save` while writes flow (every write
// acknowledged before it is in the file), `snapshot status`, refusals of a
// corrupted and a truncated file, `snapshot restore` into a fresh
// single-voter cluster that serves every node with the same data and
// version and continues the epochs; then two of the three voters are lost
// for good and `raft unsafe-recover` (refused while the coordinator runs
// and without --i-understand-data-loss) makes the third a single voter
// that holds every acknowledged write and takes a new voter.
func TestRaftSnapshotAndRecover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real coordinator processes")
	}
	ps := startRaftCoordinators(t, 3)
	bs := bootstrapOf(ps)
	st := waitRaftHealthy(t, bs, 3)
	client, err := adminclient.NewClient(strings.Split(strings.TrimPrefix(bs, "--bootstrap-servers="), ","))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	w := startDBWriter(client, "db")
	testutil.WaitFor(t, 30*time.Second, "writes before the snapshot", func() bool { return len(w.ackedNames()) >= 10 })

	dir := t.TempDir()
	file := filepath.Join(dir, "backup.jsonl")
	before := w.ackedNames()
	stdout, stderr, code := runCLI(t, "raft", "snapshot", "save", file, "--json", bs)
	var saved snapshotReport
	if code != ExitOK || json.Unmarshal([]byte(stdout), &saved) != nil || saved.Nodes == 0 || saved.SHA256 == "" || saved.Epoch <= 0 || saved.ClusterID != st.ClusterID {
		t.Fatalf("snapshot save: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "received ") {
		t.Errorf("snapshot save showed no progress on stderr: %q", stderr)
	}
	acked := w.halt()
	if len(acked) == len(before) {
		t.Errorf("no write was acknowledged while the snapshot was taken")
	}
	tree, _, err := readSnapshot(file)
	if err != nil {
		t.Fatal(err)
	}
	inTree := map[string]migrate.Node{}
	for _, n := range tree.Nodes {
		inTree[n.Path] = n
	}
	for _, name := range before {
		if _, ok := inTree[catalog.DatabasesPath+"/"+name]; !ok {
			t.Errorf("database %s, acknowledged before the save, is not in the snapshot", name)
		}
	}
	if _, _, code := runCLI(t, "raft", "snapshot", "save", file, bs); code != ExitUsage {
		t.Errorf("snapshot save over an existing file: exit %d, want a usage error", code)
	}
	stdout, stderr, code = runCLI(t, "raft", "snapshot", "status", file, "--json")
	var status snapshotReport
	if code != ExitOK || json.Unmarshal([]byte(stdout), &status) != nil || status.SHA256 != saved.SHA256 || status.Nodes != saved.Nodes || status.Revision != saved.Revision {
		t.Errorf("snapshot status: exit %d\n%s%s (saved %+v)", code, stdout, stderr, saved)
	}

	// A corrupted and a truncated file are refused, and nothing is
	// written.
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := append([]byte(nil), raw...)
	corrupt[len(corrupt)/2] ^= 0x01
	for name, b := range map[string][]byte{"corrupt": corrupt, "truncated": raw[:len(raw)*2/3]} {
		bad := filepath.Join(dir, name+".jsonl")
		os.WriteFile(bad, b, 0o640)
		wantCLIError(t, ExitFailure, CodeBadFile, "raft", "snapshot", "status", bad, "--json")
		target := filepath.Join(dir, name+"-restore")
		wantCLIError(t, ExitFailure, CodeBadFile, "raft", "snapshot", "restore", bad, "--data-dir", target, "--no-env", "--json")
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Errorf("a refused restore of the %s file created %s", name, target)
		}
	}

	// Restore into a fresh single-voter cluster and compare every node.
	rport := testutil.FreePort(t)
	r := &raftProc{id: "1", client: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)), raft: fmt.Sprintf("127.0.0.1:%d", rport),
		dir: filepath.Join(dir, "restored")}
	rvoters := "1@" + r.raft
	if _, stderr, code := runCLI(t, "raft", "snapshot", "restore", file, "--no-env"); code != ExitUsage {
		t.Errorf("snapshot restore without --data-dir: exit %d %s", code, stderr)
	}
	stdout, stderr, code = runCLI(t, "raft", "snapshot", "restore", file, "--data-dir", r.dir, "--no-env", "--json",
		"--voters", rvoters, "--node-id", "1", "-D", "coordinator.raft.port="+strconv.Itoa(rport))
	var restored struct{ Nodes int } // the --json answer's "nodes"
	if code != ExitOK || json.Unmarshal([]byte(stdout), &restored) != nil || restored.Nodes != saved.Nodes {
		t.Fatalf("snapshot restore: exit %d\n%s%s", code, stdout, stderr)
	}
	// Restoring again into the now formatted directory is refused.
	wantCLIError(t, ExitFailure, "INVALID_ARGUMENT", "raft", "snapshot", "restore", file, "--data-dir", r.dir, "--no-env", "--json",
		"-D", "coordinator.raft.voters="+rvoters, "-D", "coordinator.raft.node.id=1", "-D", "coordinator.raft.port="+strconv.Itoa(rport))
	spawnRaftProc(t, r, r.client, rvoters, rport)
	rbs := "--bootstrap-servers=" + r.client
	waitRaftHealthy(t, rbs, 1)
	again := filepath.Join(dir, "again.jsonl")
	if stdout, stderr, code := runCLI(t, "raft", "snapshot", "save", again, rbs); code != ExitOK {
		t.Fatalf("snapshot save of the restored cluster: exit %d\n%s%s", code, stdout, stderr)
	}
	tree2, _, err := readSnapshot(again)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]migrate.Node{}
	for _, n := range tree2.Nodes {
		got[n.Path] = n
	}
	for _, n := range tree.Nodes {
		g, ok := got[n.Path]
		// Export writes the source's epoch into /coordinators/epoch
		// (adding it, and /coordinators, with no times, where the Raft
		// store lacks them): the restored cluster's is higher, and a node
		// the export made up has the restore's times.
		madeUp := n.CreateTime == 0 && n.ModifyTime == 0
		switch {
		case !ok:
			t.Errorf("%s: missing from the restored cluster", n.Path)
		case n.Path == catalog.CoordinatorEpochPath:
			src, _ := catalog.DecodeEpoch(n.Data)
			dst, _ := catalog.DecodeEpoch(g.Data)
			if src < saved.Epoch || dst <= src {
				t.Errorf("%s: source %q (leader epoch %d), restored %q: want the source's epoch, then a higher one", n.Path, n.Data, saved.Epoch, g.Data)
			}
		case madeUp && (string(g.Data) != string(n.Data) || g.Version != n.Version):
			t.Errorf("%s: restored %q version %d, source %q version %d", n.Path, g.Data, g.Version, n.Data, n.Version)
		case madeUp:
		case string(g.Data) != string(n.Data) || g.Version != n.Version || g.CreateTime != n.CreateTime || g.ModifyTime != n.ModifyTime:
			t.Errorf("%s: restored %q version %d times %d/%d, source %q version %d times %d/%d",
				n.Path, g.Data, g.Version, g.CreateTime, g.ModifyTime, n.Data, n.Version, n.CreateTime, n.ModifyTime)
		}
	}
	if tree2.Header.Epoch <= saved.Epoch {
		t.Errorf("the restored cluster's epoch %d is not above the source's %d", tree2.Header.Epoch, saved.Epoch)
	}

	// Unsafe recovery: the leader survives, the two others are lost for
	// good.
	st = waitRaftHealthy(t, bs, 3)
	var survivor *raftProc
	for _, p := range ps {
		if p.id == st.LeaderID {
			survivor = p
		}
	}
	var voters []string
	for _, p := range ps {
		voters = append(voters, p.id+"@"+p.raft)
	}
	port := strings.TrimPrefix(survivor.raft, "127.0.0.1:")
	recoverArgs := []string{"raft", "unsafe-recover", "--data-dir", survivor.dir, "--no-env", "--json",
		"-D", "coordinator.raft.voters=" + strings.Join(voters, ","), "-D", "coordinator.raft.node.id=" + survivor.id, "-D", "coordinator.raft.port=" + port}
	wantCLIError(t, ExitUsage, codeUsage, recoverArgs...)
	wantCLIError(t, ExitFailure, CodeDirInUse, append(recoverArgs, "--i-understand-data-loss")...)
	for _, p := range ps {
		if p != survivor {
			p.kill()
			os.RemoveAll(p.dir)
		}
	}
	survivor.kill()
	stdout, stderr, code = runCLI(t, append(recoverArgs, "--i-understand-data-loss")...)
	var rec struct { // the --json answer's fields this test reads
		Rewritten    bool     `json:"rewritten"`
		Removed      []string `json:"removed"`
		AppliedIndex uint64   `json:"applied_index"`
	}
	if code != ExitOK || json.Unmarshal([]byte(stdout), &rec) != nil || !rec.Rewritten || len(rec.Removed) != 2 || rec.AppliedIndex == 0 {
		t.Fatalf("unsafe-recover: exit %d\n%s%s", code, stdout, stderr)
	}
	s2 := &raftProc{id: survivor.id, client: survivor.client, raft: survivor.raft, dir: survivor.dir}
	portN, _ := strconv.Atoi(port)
	spawnRaftProc(t, s2, s2.client, strings.Join(voters, ","), portN)
	sbs := "--bootstrap-servers=" + s2.client
	waitRaftHealthy(t, sbs, 1)
	names := listDatabases(t, s2.client)
	for _, name := range acked {
		if !names[name] {
			t.Errorf("acknowledged database %s lost by the recovery", name)
		}
	}
	// It takes a new voter.
	p4 := &raftProc{id: "4", client: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}
	port4 := testutil.FreePort(t)
	p4.raft = fmt.Sprintf("127.0.0.1:%d", port4)
	spawnRaftProc(t, p4, s2.client+","+p4.client, strings.Join(append(voters, "4@"+p4.raft), ","), port4, "coordinator.raft.join=true")
	if stdout, stderr, code := runCLI(t, "raft", "add-voter", "--id", "4", "--address", p4.raft, sbs); code != ExitOK {
		t.Fatalf("add-voter after the recovery: exit %d\n%s%s", code, stdout, stderr)
	}
	waitRaftHealthy(t, sbs+","+p4.client, 2)
}

// readSnapshot reads and checks a whole snapshot file.
func readSnapshot(path string) (*migrate.Tree, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	t, err := migrate.Read(f)
	if err != nil {
		return nil, 0, &CodedErr{Code: CodeBadFile, Err: fmt.Errorf("%s: %w", path, err)}
	}
	return t, fi.Size(), nil
}
