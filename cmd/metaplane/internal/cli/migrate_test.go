package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/internal/testutil"
)

// coordinatorProc runs `metaplane coordinator` with args until the test
// (or stop) ends it; it returns the --bootstrap-servers flag of its client
// listener once it serves the admin verbs.
func coordinatorProc(t *testing.T, dir string, args ...string) (bs string, stop func()) {
	t.Helper()
	bs, stop = startCoordinatorProc(t, dir, args...)
	waitServes(t, bs)
	return bs, stop
}

// waitServes waits until the coordinators at bs serve the admin verbs.
func waitServes(t *testing.T, bs string) {
	t.Helper()
	testutil.WaitFor(t, 60*time.Second, "the coordinator serves", func() bool {
		_, _, code := runCLI(t, "admin", "list-databases", bs, "--timeout=2s")
		return code == ExitOK
	})
}

// startCoordinatorProc is coordinatorProc without the wait.
func startCoordinatorProc(t *testing.T, dir string, args ...string) (bs string, stop func()) {
	t.Helper()
	client := strconv.Itoa(testutil.FreePort(t))
	cmd := exec.Command(testutil.Binary(t, "metaplane"), append([]string{"coordinator", "--no-env",
		"-D", "bind.listeners=CLIENT://127.0.0.1:" + client, "-D", "metrics.address=127.0.0.1:0"}, args...)...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("coordinator %v output:\n%s", args, out.String())
		}
	})
	bs = "--bootstrap-servers=127.0.0.1:" + client
	return bs, stop
}

func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	o, e, code := runCLI(t, args...)
	if code != ExitOK {
		t.Fatalf("%v: exit %d\n%s%s", args, code, o, e)
	}
	return o
}

// TestMigrateZooKeeperToRaft moves a catalog written by a real ZooKeeper
// coordinator to a fresh single-voter Raft store with the zk-to-raft
// verbs: the export is refused when corrupted (nothing written), the
// import keeps versions and refuses a second run, validate finds the
// stores equal, and a Raft coordinator started on the imported store
// serves the same catalog.
func TestMigrateZooKeeperToRaft(t *testing.T) {
	srv, bin, dir := migrationSetup(t)
	zk := []string{"--no-env", "-D", "metadata.backend.plugin.dir=" + bin, "-D", "zookeeper.address=" + srv.ConnectString(),
		"-D", "zookeeper.path.root=/migrate-test", "-D", "zookeeper.client.session-timeout=4s"}
	raftDir := filepath.Join(dir, "raft")
	raft := []string{"--no-env", "-D", "metadata.backend.plugin.dir=" + bin, "-D", "coordinator.raft.dir=" + raftDir,
		"-D", "coordinator.raft.port=" + strconv.Itoa(testutil.FreePort(t))}

	// The source: a catalog written by a ZooKeeper coordinator.
	bs, stop := coordinatorProc(t, dir, zk[1:]...)
	mustCLI(t, "admin", "create-database", "shop", bs)
	mustCLI(t, "admin", "create-table", "shop.orders", "--column", "id:BIGINT", "--column", "amount:DOUBLE", "--primary-key", "id", "--buckets", "3", bs)
	mustCLI(t, "admin", "create-table", "shop.users", "--column", "id:BIGINT", "--column", "name:STRING", "--buckets", "2", bs)
	describe := mustCLI(t, "admin", "describe-table", "shop.orders", "--json", bs)
	stop()

	file := filepath.Join(dir, "tree.jsonl")
	out := mustCLI(t, append([]string{"zk-to-raft-export", "--out", file}, zk...)...)
	if !strings.Contains(out, "exported") || !strings.Contains(out, "of zookeeper at revision") {
		t.Errorf("export said %q", out)
	}
	if _, _, code := runCLI(t, append([]string{"zk-to-raft-export", "--out", file}, zk...)...); code != ExitFailure {
		t.Errorf("an export over an existing file: exit %d, want %d", code, ExitFailure)
	}

	// A corrupted file is refused before anything starts.
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	flipped := bytes.Replace(b, []byte(`"version":0`), []byte(`"version":9`), 1)
	if err := os.WriteFile(bad, flipped, 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCLI(t, append([]string{"zk-to-raft-import", bad}, raft...)...)
	if code != ExitFailure || !strings.Contains(errOut, "checksum") || !strings.Contains(errOut, "nothing was written") {
		t.Errorf("corrupted file: exit %d, %q", code, errOut)
	}
	if _, err := os.Stat(raftDir); !os.IsNotExist(err) {
		t.Errorf("a refused import created the Raft store (%v)", err)
	}
	// The wrong target is named.
	if _, errOut, code := runCLI(t, append([]string{"zk-to-raft-import", file}, zk...)...); code != ExitFailure || !strings.Contains(errOut, "needs the raft backend") {
		t.Errorf("import into ZooKeeper with zk-to-raft-import: exit %d, %q", code, errOut)
	}

	out = mustCLI(t, append([]string{"zk-to-raft-import", file}, raft...)...)
	if !strings.Contains(out, "versions and times kept") {
		t.Errorf("import said %q", out)
	}
	out = mustCLI(t, append([]string{"zk-to-raft-validate", file}, raft...)...)
	if !strings.Contains(out, "valid: raft holds") || !strings.Contains(out, "data and versions equal") {
		t.Errorf("validate said %q", out)
	}
	if _, errOut, code := runCLI(t, append([]string{"zk-to-raft-import", file}, raft...)...); code != ExitFailure || !strings.Contains(errOut, "not empty") {
		t.Errorf("a second import: exit %d, %q", code, errOut)
	}

	// A Raft coordinator on the imported store serves the same catalog.
	bs, stopRaft := coordinatorProc(t, dir, raft[1:]...)
	if got := mustCLI(t, "admin", "list-tables", "shop", bs); got != "orders\nusers\n" {
		t.Errorf("list-tables on Raft: %q", got)
	}
	if got := mustCLI(t, "admin", "describe-table", "shop.orders", "--json", bs); got != describe {
		t.Errorf("describe-table differs after the migration:\n zk: %s\nraft: %s", describe, got)
	}

	// Rolling back after writes on Raft: the same engine copies Raft to an
	// empty ZooKeeper root (versions restart there, and the tool says so),
	// and a ZooKeeper coordinator on it serves the table created on Raft.
	mustCLI(t, "admin", "create-table", "shop.returns", "--column", "id:BIGINT", "--buckets", "1", bs)
	stopRaft()
	back := filepath.Join(dir, "back.jsonl")
	mustCLI(t, append([]string{"migrate", "export", "--out", back}, raft...)...)
	zkBack := append(append([]string(nil), zk...), "-D", "zookeeper.path.root=/migrate-rollback")
	out = mustCLI(t, append([]string{"migrate", "import", back}, zkBack...)...)
	if !strings.Contains(out, "restarts at version 0") {
		t.Errorf("import into ZooKeeper said %q, want it to say versions restart", out)
	}
	if o, e, code := runCLI(t, append([]string{"migrate", "validate", back}, zkBack...)...); code != ExitOK || !strings.Contains(o, "data equal") {
		t.Errorf("validate on ZooKeeper: exit %d\n%s%s", code, o, e)
	}
	if _, _, code := runCLI(t, append([]string{"migrate", "validate", "--versions", back}, zkBack...)...); code != ExitFailure {
		t.Errorf("validate --versions on ZooKeeper after an import that restarted versions: exit %d, want %d", code, ExitFailure)
	}
	bs, _ = coordinatorProc(t, dir, zkBack[1:]...)
	if got := mustCLI(t, "admin", "list-tables", "shop", bs); got != "orders\nreturns\nusers\n" {
		t.Errorf("list-tables after the rollback to ZooKeeper: %q", got)
	}
}

// TestMigrateOutputFlags: a migration verb's stderr carries its progress
// and its plugin's INFO records; --log-level warn drops the records and
// keeps the progress, --quiet drops both; the result on stdout stays.
func TestMigrateOutputFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft plugin")
	}
	bin := filepath.Dir(testutil.Binary(t, "metaplane-backend-raft"))
	dir := t.TempDir()
	raft := []string{"--no-env", "-D", "metadata.backend.plugin.dir=" + bin, "-D", "coordinator.raft.dir=" + filepath.Join(dir, "raft"),
		"-D", "coordinator.raft.port=" + strconv.Itoa(testutil.FreePort(t))}
	tests := []struct {
		name                string
		flags               []string
		records, progressed bool
	}{
		{"default", nil, true, true},
		{"log-level warn", []string{"--log-level", "warn"}, false, true},
		{"quiet", []string{"--quiet"}, false, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(dir, strconv.Itoa(i)+".jsonl")
			stdout, stderr, code := runCLI(t, append(append([]string{"migrate", "export", "--out", file}, raft...), tt.flags...)...)
			if code != ExitOK || !strings.Contains(stdout, "exported") {
				t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
			}
			if got := strings.Contains(stderr, "level=INFO"); got != tt.records {
				t.Errorf("INFO records on stderr: %v, want %v:\n%s", got, tt.records, stderr)
			}
			if got := strings.Contains(stderr, "reading the tree of raft"); got != tt.progressed {
				t.Errorf("progress on stderr: %v, want %v:\n%s", got, tt.progressed, stderr)
			}
			if !tt.records && !tt.progressed && stderr != "" {
				t.Errorf("--quiet left stderr %q", stderr)
			}
		})
	}
	// The offline verbs take the flags too.
	if _, stderr, code := runCLI(t, "raft", "bootstrap", "--data-dir", filepath.Join(dir, "boot"), "--quiet", "--no-env"); code != ExitOK || stderr != "" {
		t.Errorf("raft bootstrap --quiet: exit %d, stderr %q", code, stderr)
	}
}
