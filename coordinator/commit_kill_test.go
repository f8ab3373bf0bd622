package coordinator_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// answerKiller is a TCP proxy in front of a coordinator's client listener
// that reads the coordinator's HTTP/2 frames. Armed, it kills the
// coordinator at the first HEADERS frame it sends (a gRPC server sends a
// call's response headers only with its answer, after the handler
// returned, so after the write committed) and drops that answer: the
// leader dies exactly between the commit and the answer.
type answerKiller struct {
	ln     net.Listener
	target string
	kill   func()
	armed  atomic.Bool
	once   sync.Once
	fired  chan struct{}
}

func newAnswerKiller(t *testing.T, target string, kill func()) *answerKiller {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := &answerKiller{ln: ln, target: target, kill: kill, fired: make(chan struct{})}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go k.relay(c)
		}
	}()
	return k
}

func (k *answerKiller) addr() string { return k.ln.Addr().String() }

func (k *answerKiller) relay(client net.Conn) {
	defer client.Close()
	server, err := net.DialTimeout("tcp", k.target, 2*time.Second)
	if err != nil {
		return
	}
	defer server.Close()
	go func() { io.Copy(server, client); server.Close() }()
	r := bufio.NewReader(server)
	hdr := make([]byte, 9)
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			return
		}
		payload := make([]byte, int(hdr[0])<<16|int(hdr[1])<<8|int(hdr[2]))
		if _, err := io.ReadFull(r, payload); err != nil {
			return
		}
		const headersFrame = 0x1
		if hdr[3] == headersFrame && k.armed.CompareAndSwap(true, false) {
			k.once.Do(func() { k.kill(); close(k.fired) })
			return
		}
		if _, err := client.Write(append(hdr, payload...)); err != nil {
			return
		}
	}
}

// TestKillLeaderBetweenCommitAndAnswer: the Raft leader coordinator is
// SIGKILLed after it committed a create-table and before its answer left.
// The CLI, which could reach only that leader, exits 3 (outcome unknown)
// naming the request id; repeated with that id against the survivors it
// answers the original creation (created, with the table id the table
// has) instead of "already exists", and the table exists once.
func TestKillLeaderBetweenCommitAndAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ms := startRaftCluster(t, ctx, 3)
	var addrs []string
	for _, m := range ms {
		addrs = append(addrs, m.client)
	}
	c, err := adminclient.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lead := waitServingLeader(t, ctx, c, "")
	var leader *raftMember
	var others []string
	for _, m := range ms {
		if adminapi.HostPort(lead.GetLeaderAddress()) == m.client {
			leader = m
		} else {
			others = append(others, m.client)
		}
	}
	if leader == nil || len(others) != 2 {
		t.Fatalf("leader %+v not among the members", lead)
	}
	if err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		if _, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "shop"}); err != nil {
			return err
		}
		// A first table, so that the one under test has a table id other
		// than 0 (a zero value would compare equal by accident).
		_, err := a.CreateTable(ctx, &adminv1.CreateTableRequest{Database: "shop", Table: "first",
			Descriptor_: &adminv1.TableDescriptor{Columns: []*adminv1.Column{{Name: "id", Type: "INT"}}, BucketCount: 1}})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	k := newAnswerKiller(t, leader.client, func() { leader.p.group(syscall.SIGKILL) })
	// Warm the proxied connection up (settings, a first answer) before
	// arming it: the armed HEADERS frame is then the create's answer.
	bin := testutil.Binary(t, "metaplane")
	if out, err := exec.CommandContext(ctx, bin, "admin", "--bootstrap-servers", k.addr(), "--timeout", "10s", "list-databases").CombinedOutput(); err != nil {
		t.Fatalf("list-databases through the proxy: %v\n%s", err, out)
	}
	k.armed.Store(true)
	const id = "commit-kill-1"
	create := []string{"admin", "--json", "--timeout", "4s", "--request-id", id, "create-table", "shop.orders",
		"--column", "id:INT", "--primary-key", "id", "--buckets", "2"}
	out, err := exec.CommandContext(ctx, bin, append(create[:1], append([]string{"--bootstrap-servers", k.addr()}, create[1:]...)...)...).CombinedOutput()
	select {
	case <-k.fired:
	default:
		t.Fatalf("the leader was not killed at the create's answer: %v\n%s", err, out)
	}
	<-leader.p.done
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(string(out), "outcome unknown") || !strings.Contains(string(out), id) {
		t.Fatalf("create through the killed leader: %v\n%s\nwant exit 3, outcome unknown, naming request id %s", err, out, id)
	}

	// The create had committed when its answer was dropped: the
	// survivors have the table already.
	var before *adminv1.GetTableInfoResponse
	if err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		var err error
		before, err = a.GetTableInfo(ctx, &adminv1.GetTableInfoRequest{Database: "shop", Table: "orders"})
		return err
	}); err != nil {
		t.Fatalf("the table whose answer was dropped, on the survivors: %v", err)
	}

	out, err = exec.CommandContext(ctx, bin, append(create[:1], append([]string{"--bootstrap-servers", strings.Join(others, ",")}, create[1:]...)...)...).Output()
	if err != nil {
		t.Fatalf("repeat with request id %s on the survivors: %v\n%s", id, err, out)
	}
	var got struct {
		Created bool `json:"created"`
		Table   struct {
			TableID json.Number `json:"table_id"`
		} `json:"table"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("decode %s: %v", out, err)
	}
	var desc *adminv1.GetTableInfoResponse
	var tables *adminv1.ListTablesResponse
	if err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		var err error
		if desc, err = a.GetTableInfo(ctx, &adminv1.GetTableInfoRequest{Database: "shop", Table: "orders"}); err != nil {
			return err
		}
		tables, err = a.ListTables(ctx, &adminv1.ListTablesRequest{Database: "shop"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if tid := desc.GetTable().GetTableId(); !got.Created || tid == 0 || tid != before.GetTable().GetTableId() || got.Table.TableID.String() != strconv.FormatInt(tid, 10) {
		t.Fatalf("repeated create answered %s, want created with table id %d", out, desc.GetTable().GetTableId())
	}
	if n := len(tables.GetNames()); n != 2 {
		t.Fatalf("shop has %d tables after the repeated create, want 2 (first, orders): %v", n, tables)
	}
}
