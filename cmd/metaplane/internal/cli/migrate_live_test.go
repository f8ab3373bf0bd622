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

// TestLiveMigrateZooKeeperToRaft: zk-to-raft-live-migrate copies a
// ZooKeeper cluster whose coordinator keeps taking writes into an empty
// Raft store: every write acknowledged is on Raft, writes after the fence
// are refused on ZooKeeper, validate passes, and a Raft coordinator on the
// copy serves it with a higher epoch and continuing table ids; a second
// run is refused on the marker.
func TestLiveMigrateZooKeeperToRaft(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper, coordinators and plugins")
	}
	srv := zktest.StartServer(t)
	bin := filepath.Dir(testutil.Binary(t, "metaplane-backend-zookeeper"))
	testutil.Binary(t, "metaplane-backend-raft")
	dir := t.TempDir()
	zkCfg := writeConfig(t, dir, "zk.yaml", map[string]string{"metadata.backend.plugin.dir": bin,
		"zookeeper.address": srv.ConnectString(), "zookeeper.path.root": "/live-test", "zookeeper.client.session-timeout": "4s"})
	raftCfg := writeConfig(t, dir, "raft.yaml", map[string]string{"metadata.backend.plugin.dir": bin,
		"coordinator.raft.dir": filepath.Join(dir, "raft"), "coordinator.raft.port": strconv.Itoa(testutil.FreePort(t))})

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
			cctx, cancel := context.WithTimeout(wctx, 2*time.Second)
			err := c.Admin(cctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
				_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: name})
				return err
			})
			cancel()
			if err == nil {
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
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Nodes == 0 || len(res.Rounds) == 0 || res.TargetEpoch < res.SourceEpoch || res.SourceEpoch < 1 {
		t.Errorf("result %s", out)
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
