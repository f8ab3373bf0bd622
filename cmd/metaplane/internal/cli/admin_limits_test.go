package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// runBinary runs the built metaplane binary with args and returns its
// streams and exit status.
func runBinary(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"HOME=" + t.TempDir()}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %s: %v", bin, err)
	}
	return out.String(), errb.String(), code
}

// TestAdminCLIRefusesBadInput runs the metaplane binary with bad input
// against a coordinator on a memory store with two registered tablet
// servers: each command exits with the status given, its message names
// the flag (or field) and the limit, and the tree is unchanged.
func TestAdminCLIRefusesBadInput(t *testing.T) {
	bin := testutil.Binary(t, "metaplane")
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	addr := startMemoryCoordinatorOn(t, s)
	b := s.NewClient(core.ClientOptions{Name: "tablets"})
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	for _, id := range []int32{1, 2} {
		reg := catalog.TabletServerRegistration{Listeners: "CLIENT://127.0.0.1:1", RegisterTimestamp: 1}
		if _, _, err := core.Create(ctx, b, catalog.TabletServerPath(id), reg.Marshal(),
			core.CreateOptions{Mode: core.Ephemeral, MakeParents: true}); err != nil {
			t.Fatal(err)
		}
	}
	bs := "--bootstrap-servers=" + addr
	testutil.WaitFor(t, 10*time.Second, "the leader sees both tablet servers", func() bool {
		out, _, code := runCLI(t, "admin", "list-tablet-servers", bs)
		return code == ExitOK && strings.Count(out, "CLIENT://") == 2
	})
	if _, stderr, code := runCLI(t, "admin", "create-database", "shop", bs); code != ExitOK {
		t.Fatalf("create-database: %s", stderr)
	}
	tests := []struct {
		name string
		args []string
		code int
		want []string // substrings of stderr
	}{
		{"buckets over int32", []string{"create-table", "shop.t", "--column", "id:INT", "--buckets", "2147483648"},
			ExitUsage, []string{`"--buckets"`, "2147483648 is out of range", "from 1 to 2147483647"}},
		{"zero buckets", []string{"create-table", "shop.t", "--column", "id:INT", "--buckets", "0"},
			ExitUsage, []string{`"--buckets"`, "from 1 to"}},
		{"buckets max int32", []string{"create-table", "shop.t", "--column", "id:INT", "--buckets", "2147483647"},
			ExitFailure, []string{"bucket count 2147483647", "1 to 20000", "max.bucket.num"}},
		{"buckets over max.bucket.num", []string{"create-table", "shop.t", "--column", "id:INT", "--buckets", "100000"},
			ExitFailure, []string{"bucket count 100000", "1 to 20000"}},
		{"zero replication factor", []string{"create-table", "shop.t", "--column", "id:INT", "--replication-factor", "0"},
			ExitUsage, []string{`"--replication-factor"`, "from 1 to"}},
		{"replication factor over the servers", []string{"create-table", "shop.t", "--column", "id:INT", "--replication-factor", "3"},
			ExitFailure, []string{"replication factor 3", "1 to 2", "registered tablet servers"}},
		{"columns differing in case", []string{"create-table", "shop.t", "--column", "id:INT", "--column", "ID:BIGINT"},
			ExitFailure, []string{`"id" and "ID"`, "ignoring case"}},
		{"CHAR(0)", []string{"create-table", "shop.t", "--column", "c:CHAR(0)"},
			ExitFailure, []string{"CHAR length 0", "1 to 2147483647"}},
		{"DECIMAL(39,2)", []string{"create-table", "shop.t", "--column", "c:DECIMAL(39,2)"},
			ExitFailure, []string{"precision 39", "1 to 38"}},
		{"buckets over the limit, json", []string{"create-table", "shop.t", "--column", "id:INT", "--buckets", "100000", "--json"},
			ExitFailure, []string{`"code":"INVALID_ARGUMENT"`, `"field":"descriptor.bucket_count"`, "1 to 20000"}},
		{"acl operation FLY, json", []string{"add-acl", "TABLE", "shop.t", "--principal", "USER:alice", "--operation", "FLY", "--json"},
			ExitFailure, []string{`"code":"INVALID_ARGUMENT"`, `"field":"acls.operation"`}},
		{"acl operation FLY", []string{"add-acl", "TABLE", "shop.t", "--principal", "USER:alice", "--operation", "FLY"},
			ExitFailure, []string{`"FLY"`, "ALL, READ, WRITE, CREATE, DROP, ALTER, DESCRIBE"}},
		{"acl permission MAYBE", []string{"add-acl", "TABLE", "shop.t", "--principal", "USER:alice", "--operation", "READ", "--permission", "MAYBE"},
			ExitFailure, []string{`"MAYBE"`, "ALLOW, DENY"}},
		{"acl resource type", []string{"add-acl", "SHELF", "x", "--principal", "USER:alice", "--operation", "READ"},
			ExitFailure, []string{`"SHELF"`, "CLUSTER, DATABASE, TABLE"}},
		{"allocate over the server's limit", []string{"allocate-ids", "writer", "--count", "1000001"},
			ExitUsage, []string{`"--count"`, "out of range", "from 1 to 1000000"}},
		{"allocate max int64 ids", []string{"allocate-ids", "writer", "--count", "9223372036854775807"},
			ExitUsage, []string{"9223372036854775807", "from 1 to 1000000"}},
		{"allocate over int64 ids", []string{"allocate-ids", "writer", "--count", "9223372036854775808"},
			ExitUsage, []string{`"--count"`, "out of range", "from 1 to 1000000"}},
		{"allocate 0 ids", []string{"allocate-ids", "writer", "--count", "0"},
			ExitUsage, []string{`"--count"`, "from 1 to"}},
		{"tag a server that does not exist", []string{"set-server-tag", "99", "--tag", "0"},
			ExitFailure, []string{"tablet server 99 does not exist"}},
		{"negative tag", []string{"set-server-tag", "1", "--tag", "-1"},
			ExitUsage, []string{`"--tag"`, "from 0 to"}},
		{"server id over int32", []string{"set-server-tag", "2147483648", "--tag", "0"},
			ExitUsage, []string{`"2147483648" is not a tablet server id`, "0 to 2147483647"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := b.Snapshot(ctx, "/")
			if err != nil {
				t.Fatal(err)
			}
			args := append(append([]string{"admin"}, tt.args...), bs, "--timeout", "20s")
			stdout, stderr, code := runBinary(t, bin, args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not say %q", stderr, w)
				}
			}
			after, err := b.Snapshot(ctx, "/")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(before, after) {
				t.Errorf("the refused command changed the tree: revision %d -> %d", before.Revision, after.Revision)
			}
		})
	}
}

// unavailableAdmin answers every CreateDatabase UNAVAILABLE (outcome
// UNKNOWN), counting the calls and the request ids they carried.
type unavailableAdmin struct {
	adminv1.UnimplementedAdminServiceServer
	calls atomic.Int32
	mu    sync.Mutex
	ids   map[string]int
}

func (u *unavailableAdmin) CreateDatabase(ctx context.Context, _ *adminv1.CreateDatabaseRequest) (*adminv1.CreateDatabaseResponse, error) {
	u.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	u.mu.Lock()
	if u.ids == nil {
		u.ids = map[string]int{}
	}
	u.ids[strings.Join(md.Get(adminapi.RequestIDHeader), ",")]++
	u.mu.Unlock()
	return nil, adminapi.ToStatus(fmt.Errorf("%w: no quorum", core.ErrUnavailable))
}

// TestAdminOutcomeUnknown: a write answered with outcome UNKNOWN is
// repeated with its request id until --timeout; then the verb says
// "outcome unknown", names the id, and exits 3 (in text and with --json).
func TestAdminOutcomeUnknown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &unavailableAdmin{}
	s := grpc.NewServer()
	adminv1.RegisterAdminServiceServer(s, u)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	bs := "--bootstrap-servers=" + l.Addr().String()

	_, stderr, code := runCLI(t, "admin", "create-database", "shop", bs, "--timeout", "1s", "--request-id", "req-7")
	if code != ExitOutcomeUnknown || !strings.Contains(stderr, "outcome unknown: CreateDatabase (request id req-7) was sent to") ||
		!strings.Contains(stderr, "no quorum") {
		t.Fatalf("exit %d, stderr %q: want exit %d saying outcome unknown", code, stderr, ExitOutcomeUnknown)
	}
	_, stderr, code = runCLI(t, "admin", "create-database", "shop", bs, "--json", "--timeout", "1s")
	var e jsonError
	if code != ExitOutcomeUnknown || json.Unmarshal([]byte(stderr), &e) != nil || e.Code != codeOutcomeUnknown {
		t.Fatalf("--json: exit %d, stderr %q", code, stderr)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.ids) != 2 || u.ids["req-7"] < 2 || u.ids[""] != 0 {
		t.Errorf("request ids of the writes %v: want two ids (req-7 and a fresh one), each repeated", u.ids)
	}
}
