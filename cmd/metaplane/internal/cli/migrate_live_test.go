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
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/zktest"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

func writeConfig(t *testing.T, dir, name string, kv map[string]string) string {
	t.Helper()
	var b strings.Builder
	for k, v := range kv {
		fmt.Fprintf(&b, "%s: %q\n", k, v)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// migrationSetup skips under -short, and starts a ZooKeeper server and
// finds the plugin binaries (their directory) for a migration test.
func migrationSetup(t *testing.T) (srv *zktest.Cluster, bin, dir string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts ZooKeeper, coordinators and plugins")
	}
	srv = zktest.StartServer(t)
	bin = filepath.Dir(testutil.Binary(t, "metaplane-backend-zookeeper"))
	testutil.Binary(t, "metaplane-backend-raft")
	return srv, bin, t.TempDir()
}

// createDatabase creates database name through c within timeout.
func createDatabase(ctx context.Context, c *adminclient.Client, name string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: name})
		return err
	})
}

// liveConfigs writes a source configuration (ZooKeeper srv under root,
// 4 s sessions) and a target one (a single Raft voter under dir/raft).
func liveConfigs(t *testing.T, srv *zktest.Cluster, bin, dir, root string) (zkCfg, raftCfg string) {
	t.Helper()
	zkCfg = writeConfig(t, dir, "zk.yaml", map[string]string{"metadata.backend.plugin.dir": bin,
		"zookeeper.address": srv.ConnectString(), "zookeeper.path.root": root, "zookeeper.client.session-timeout": "4s"})
	raftCfg = writeConfig(t, dir, "raft.yaml", map[string]string{"metadata.backend.plugin.dir": bin,
		"coordinator.raft.dir": filepath.Join(dir, "raft"), "coordinator.raft.port": strconv.Itoa(testutil.FreePort(t))})
	return zkCfg, raftCfg
}

// TestLiveMigrateZooKeeperToRaft: zk-to-raft-live-migrate copies a
// ZooKeeper cluster whose coordinator keeps taking writes into an empty
// Raft store: every write acknowledged is on Raft, writes after the fence
// are refused on ZooKeeper, validate passes, and a Raft coordinator on the
// copy serves it with a higher epoch and continuing table ids; a second
// run is refused on the marker.
func TestLiveMigrateZooKeeperToRaft(t *testing.T) {
	srv, bin, dir := migrationSetup(t)
	zkCfg, raftCfg := liveConfigs(t, srv, bin, dir, "/live-test")

	bs, _ := coordinatorProc(t, dir, "--config", zkCfg)
	mustCLI(t, "admin", "create-database", "shop", bs)
	mustCLI(t, "admin", "create-table", "shop.orders", "--column", "id:BIGINT", "--primary-key", "id", "--buckets", "3", bs)
	zkFirst := jsonInt(t, mustCLI(t, "admin", "allocate-ids", "table", "--json", bs), "first")

	// A writer on the ZooKeeper coordinator until the migration ends.
	c, err := adminclient.NewClient([]string{strings.TrimPrefix(bs, "--bootstrap-servers=")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mu sync.Mutex
	var acked []string
	wctx, stopWriter := context.WithCancel(context.Background())
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for i := 0; wctx.Err() == nil; i++ {
			name := fmt.Sprintf("live%04d", i)
			if err := createDatabase(wctx, c, name, 2*time.Second); err == nil {
				mu.Lock()
				acked = append(acked, name)
				mu.Unlock()
			}
		}
	}()
	testutil.WaitFor(t, 30*time.Second, "the writer writes", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 5
	})

	out, errOut, code := runCLI(t, "zk-to-raft-live-migrate", "--from", zkCfg, "--to", raftCfg, "--no-env", "--quiet", "2", "--json")
	stopWriter()
	<-writerDone
	if code != ExitOK {
		t.Fatalf("live-migrate: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("live-migrate progress:\n%s", errOut)
	var res struct {
		Rounds      []json.RawMessage
		PauseMS     int64 `json:"pause_ms"`
		Nodes       int
		Ephemerals  int   `json:"ephemerals_skipped"`
		SourceEpoch int64 `json:"source_epoch"`
		TargetEpoch int64 `json:"target_epoch"`
		Unchanged   bool  `json:"final_unchanged"`
		Watched     bool  `json:"final_watched"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Nodes == 0 || len(res.Rounds) == 0 || res.TargetEpoch < res.SourceEpoch || res.SourceEpoch < 1 {
		t.Errorf("result %s", out)
	}
	// The coordinator leader resigns at the fence (a write after it): the
	// final scan reads what the source's watch reported.
	if !res.Watched && !res.Unchanged {
		t.Errorf("the final scan read every stat: %s", out)
	}
	if !strings.Contains(errOut, "round 1:") || !strings.Contains(errOut, "final scan") {
		t.Errorf("no progress on stderr: %q", errOut)
	}
	// The ZooKeeper side takes no more writes.
	if _, _, code := runCLI(t, "admin", "create-database", "late", bs, "--timeout=3s"); code == ExitOK {
		t.Error("a write on the fenced ZooKeeper cluster succeeded")
	}
	// A second run, into another empty store, is refused on the source's
	// marker; one into the migrated store on its content.
	other := []string{"--to-set", "coordinator.raft.dir=" + filepath.Join(dir, "raft2")}
	if _, e, code := runCLI(t, append([]string{"zk-to-raft-live-migrate", "--from", zkCfg, "--to", raftCfg, "--no-env"}, other...)...); code != ExitFailure || !strings.Contains(e, "migration marker is present on the source") {
		t.Errorf("a second run: exit %d, %q", code, e)
	}
	if _, e, code := runCLI(t, "zk-to-raft-live-migrate", "--from", zkCfg, "--to", raftCfg, "--no-env"); code != ExitFailure || !strings.Contains(e, "not empty") {
		t.Errorf("a run into the migrated store: exit %d, %q", code, e)
	}

	// A Raft coordinator on the copy serves every acknowledged write.
	rbs, _ := coordinatorProc(t, dir, "--config", raftCfg)
	dbs := mustCLI(t, "admin", "list-databases", rbs)
	mu.Lock()
	for _, name := range acked {
		if !strings.Contains(dbs, name+"\n") {
			t.Errorf("database %s, acknowledged on ZooKeeper, is not on Raft", name)
		}
	}
	t.Logf("%d writes acknowledged during the migration", len(acked))
	mu.Unlock()
	if strings.Contains(dbs, "late\n") {
		t.Error("the refused write is on Raft")
	}
	if epoch := jsonInt(t, mustCLI(t, "admin", "leader", "--json", rbs), "epoch"); epoch <= res.SourceEpoch {
		t.Errorf("the Raft leader's epoch %d is not above ZooKeeper's %d", epoch, res.SourceEpoch)
	}
	if first := jsonInt(t, mustCLI(t, "admin", "allocate-ids", "table", "--json", rbs), "first"); first <= zkFirst {
		t.Errorf("table id %d on Raft, %d was handed out on ZooKeeper", first, zkFirst)
	}
}

// jsonInt is the integer field key of a JSON object (protojson writes
// 64-bit integers as strings).
func jsonInt(t *testing.T, s, key string) int64 {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	n, err := strconv.ParseInt(fmt.Sprint(m[key]), 10, 64)
	if err != nil {
		t.Fatalf("field %s of %s: %v", key, s, err)
	}
	return n
}

// TestMigrateCopyIntoThreeVoters: migrate copy moves a ZooKeeper catalog
// into a running three-voter Raft quorum online: the tool hosts voter 1
// (its coordinator stopped) and imports through the quorum's leader while
// voters 2 and 3 run; ephemerals are skipped and counted; the leader
// resigns during the import and is elected again above the imported
// epoch; the quorum serves the same catalog with continuing table ids.
func TestMigrateCopyIntoThreeVoters(t *testing.T) {
	srv, bin, dir := migrationSetup(t)
	zkCfg := writeConfig(t, dir, "zk.yaml", map[string]string{"metadata.backend.plugin.dir": bin,
		"zookeeper.address": srv.ConnectString(), "zookeeper.path.root": "/copy-test", "zookeeper.client.session-timeout": "4s"})
	var voters []string
	ports := make([]int, 3)
	for i := range ports {
		ports[i] = testutil.FreePort(t)
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", i+1, ports[i]))
	}
	raftCfg := make([]string, 3)
	var boot [][]string
	for i := range raftCfg {
		raftCfg[i] = writeConfig(t, dir, fmt.Sprintf("raft%d.yaml", i+1), map[string]string{"metadata.backend.plugin.dir": bin,
			"coordinator.raft.voters": strings.Join(voters, ","), "coordinator.raft.node.id": strconv.Itoa(i + 1),
			"coordinator.raft.port": strconv.Itoa(ports[i]), "coordinator.raft.dir": filepath.Join(dir, fmt.Sprintf("raft%d", i+1))})
		boot = append(boot, []string{"--no-env", "--config", raftCfg[i], "-D", "coordinator.raft.dir=" + filepath.Join(dir, fmt.Sprintf("raft%d", i+1))})
	}
	// The quorum's directories are formatted first, as an operator does
	// before a multi-voter cluster's first start.
	testutil.RaftBootstrap(t, testutil.Binary(t, "metaplane"), boot...)

	zbs, _ := coordinatorProc(t, dir, "--config", zkCfg)
	mustCLI(t, "admin", "create-database", "shop", zbs)
	mustCLI(t, "admin", "create-table", "shop.orders", "--column", "id:BIGINT", "--primary-key", "id", "--buckets", "3", zbs)
	describe := mustCLI(t, "admin", "describe-table", "shop.orders", "--json", zbs)
	zkFirst := jsonInt(t, mustCLI(t, "admin", "allocate-ids", "table", "--json", zbs), "first")

	// Voters 2 and 3 run (a quorum) with their coordinators.
	bs2, _ := startCoordinatorProc(t, dir, "--config", raftCfg[1])
	bs3, _ := startCoordinatorProc(t, dir, "--config", raftCfg[2])
	waitServes(t, bs2+","+strings.TrimPrefix(bs3, "--bootstrap-servers="))
	before := jsonInt(t, mustCLI(t, "admin", "leader", "--json", bs2), "epoch")

	// The ZooKeeper coordinator still runs: its election nodes are
	// ephemeral, skipped and counted.
	out, errOut, code := runCLI(t, "migrate", "copy", "--from", zkCfg, "--to", raftCfg[0], "--no-env", "--json")
	if code != ExitOK {
		t.Fatalf("migrate copy: exit %d\n%s%s", code, out, errOut)
	}
	var res struct {
		Ephemerals int `json:"ephemerals_skipped"`
		Import     struct {
			Nodes        int
			KeptVersions bool `json:"kept_versions"`
		}
		Validate struct{ Differences []json.RawMessage }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Ephemerals < 2 || res.Import.Nodes == 0 || !res.Import.KeptVersions || len(res.Validate.Differences) != 0 {
		t.Errorf("copy result %s", out)
	}
	if !strings.Contains(errOut, "imported") || !strings.Contains(errOut, "ephemeral nodes skipped") {
		t.Errorf("copy progress %q", errOut)
	}

	bs1, _ := coordinatorProc(t, dir, "--config", raftCfg[0])
	all := bs1 + "," + strings.TrimPrefix(bs2, "--bootstrap-servers=") + "," + strings.TrimPrefix(bs3, "--bootstrap-servers=")
	testutil.WaitFor(t, 30*time.Second, "the quorum serves the copied catalog", func() bool {
		o, _, code := runCLI(t, "admin", "list-tables", "shop", all, "--timeout=2s")
		return code == ExitOK && o == "orders\n"
	})
	if got := mustCLI(t, "admin", "describe-table", "shop.orders", "--json", all); got != describe {
		t.Errorf("describe-table differs after the copy:\n zk: %s\nraft: %s", describe, got)
	}
	if after := jsonInt(t, mustCLI(t, "admin", "leader", "--json", all), "epoch"); after <= before {
		t.Errorf("the Raft leader's epoch %d after the import is not above %d before it (no re-election)", after, before)
	}
	if first := jsonInt(t, mustCLI(t, "admin", "allocate-ids", "table", "--json", all), "first"); first <= zkFirst {
		t.Errorf("table id %d on Raft, %d was handed out on ZooKeeper", first, zkFirst)
	}
}

// TestTwoStoreVerbsRefuseBadUsage: copy and live check their flags before
// starting anything (exit 2, naming what is wrong).
func TestTwoStoreVerbsRefuseBadUsage(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "a.yaml", map[string]string{"zookeeper.address": "127.0.0.1:1"})
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "copy", "--to", cfg}, "--from FILE --to FILE"},
		{[]string{"migrate", "live", "--from", cfg}, "--from FILE --to FILE"},
		{[]string{"migrate", "copy", "--from", cfg, "--to", cfg}, "the same configuration"},
		{[]string{"migrate", "live", "--from", cfg, "--to", cfg + "x", "--max-rounds", "0"}, "--max-rounds 0: want 1 to 100"},
		{[]string{"zk-to-raft-live-migrate", "--from", cfg, "--to", cfg, "--from-set", "nokey"}, "nokey"},
	} {
		_, e, code := runCLI(t, append(tt.args, "--no-env")...)
		if code != ExitUsage || !strings.Contains(e, tt.want) {
			t.Errorf("%v: exit %d, %q; want %d naming %q", tt.args, code, e, ExitUsage, tt.want)
		}
	}
}
