package cli

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
)

// startMemoryCoordinator runs a coordinator in-process on a fresh memory
// store and returns its client address.
func startMemoryCoordinator(t *testing.T) string {
	t.Helper()
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	return startMemoryCoordinatorOn(t, s)
}

// startMemoryCoordinatorOn runs a coordinator in-process on s and returns
// its client address.
func startMemoryCoordinatorOn(t *testing.T, s *memory.Store) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := coordinator.New(coordinator.Options{Listener: l,
		Open: func(ctx context.Context) (core.MetadataBackend, error) { return s.NewClient(core.ClientOptions{}), nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for !srv.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("coordinator did not lead")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return l.Addr().String()
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	compareGolden(t, filepath.Join("testdata", "admin", name+".golden"), got)
}

// TestAdminVerbsGolden runs a session of admin verbs against an in-process
// coordinator and compares each verb's output and exit code with its golden
// file.
func TestAdminVerbsGolden(t *testing.T) {
	addr := startMemoryCoordinator(t)
	bs := "--bootstrap-servers=" + addr
	steps := []struct {
		name string
		args []string
		code int
	}{
		{"create-database", []string{"create-database", "shop", "--comment", "the shop"}, ExitOK},
		{"create-database-exists", []string{"create-database", "shop"}, ExitFailure},
		{"create-database-if-not-exists", []string{"create-database", "shop", "--if-not-exists"}, ExitOK},
		{"list-databases", []string{"list-databases"}, ExitOK},
		{"create-table", []string{"create-table", "shop.orders", "--column", "id:BIGINT", "--column", "customer:STRING",
			"--column", "total:DECIMAL(10,2)", "--primary-key", "id", "--buckets", "2"}, ExitOK},
		{"create-table-bad-type", []string{"create-table", "shop.bad", "--column", "a:WIDGET"}, ExitFailure},
		{"create-table-no-column", []string{"create-table", "shop.bad"}, ExitUsage},
		{"create-table-bad-name", []string{"create-table", "shop"}, ExitUsage},
		{"create-table-if-not-exists", []string{"create-table", "shop.orders", "--column", "id:BIGINT", "--if-not-exists"}, ExitOK},
		{"describe-table", []string{"describe-table", "shop.orders"}, ExitOK},
		{"describe-table-missing", []string{"describe-table", "shop.nope"}, ExitFailure},
		{"create-partitioned", []string{"create-table", "shop.events", "--column", "day:STRING", "--column", "id:BIGINT",
			"--primary-key", "day,id", "--partition-key", "day"}, ExitOK},
		{"create-partition", []string{"create-partition", "shop.events", "2026-11-29"}, ExitOK},
		{"create-partition-if-not-exists", []string{"create-partition", "shop.events", "2026-11-29", "--if-not-exists"}, ExitOK},
		{"list-partitions", []string{"list-partitions", "shop.events"}, ExitOK},
		{"list-partitions-json", []string{"list-partitions", "shop.events", "--json"}, ExitOK},
		{"drop-partition", []string{"drop-partition", "shop.events", "2026-11-29"}, ExitOK},
		{"drop-partition-if-exists", []string{"drop-partition", "shop.events", "2026-11-29", "--if-exists"}, ExitOK},
		{"list-tables", []string{"list-tables", "shop"}, ExitOK},
		{"list-tablet-servers", []string{"list-tablet-servers"}, ExitOK},
		{"allocate-ids", []string{"allocate-ids", "writer", "--count", "10"}, ExitOK},
		{"allocate-ids-bad", []string{"allocate-ids", "nope"}, ExitFailure},
		{"add-acl", []string{"add-acl", "TABLE", "shop.orders", "--principal", "USER:alice", "--operation", "read"}, ExitOK},
		{"add-acl-again", []string{"add-acl", "TABLE", "shop.orders", "--principal", "USER:alice", "--operation", "read"}, ExitOK},
		{"list-acls", []string{"list-acls"}, ExitOK},
		{"remove-acl-no-match", []string{"remove-acl", "TABLE", "shop.orders", "--principal", "USER:bob"}, ExitOK},
		{"remove-acl-no-match-json", []string{"remove-acl", "TABLE", "shop.orders", "--principal", "USER:bob", "--json"}, ExitOK},
		{"remove-acl", []string{"remove-acl", "TABLE", "shop.orders", "--principal", "USER:alice"}, ExitOK},
		{"alter-config", []string{"alter-config", "--set", "datalake.format=paimon"}, ExitOK},
		{"describe-configs", []string{"describe-configs"}, ExitOK},
		{"drop-database-not-empty", []string{"drop-database", "shop"}, ExitFailure},
		{"drop-table", []string{"drop-table", "shop.events"}, ExitOK},
		{"drop-table-if-exists", []string{"drop-table", "shop.events", "--if-exists"}, ExitOK},
		{"drop-table-if-exists-json", []string{"drop-table", "shop.events", "--if-exists", "--json"}, ExitOK},
		{"drop-database-cascade", []string{"drop-database", "shop", "--cascade"}, ExitOK},
		{"drop-database-if-exists", []string{"drop-database", "shop", "--if-exists"}, ExitOK},
		{"list-databases-json", []string{"list-databases", "--json"}, ExitOK},
		{"unknown-verb", []string{"frobnicate"}, ExitUsage},
		{"missing-argument", []string{"list-tables"}, ExitUsage},
	}
	for _, st := range steps {
		args := append([]string{"admin"}, st.args...)
		args = append(args, bs)
		stdout, stderr, code := runCLI(t, args...)
		if code != st.code {
			t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", st.name, code, st.code, stdout, stderr)
		}
		checkGolden(t, st.name, "stdout:\n"+stdout+"stderr:\n"+strings.ReplaceAll(stderr, addr, "ADDR"))
	}
}

// TestAdminNoCoordinator fails clearly when nothing listens.
func TestAdminNoCoordinator(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, stderr, code := runCLI(t, "admin", "list-databases", "--bootstrap-servers", addr, "--timeout", "3s")
	if code != ExitFailure || !strings.Contains(stderr, "metaplane admin list-databases:") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}
