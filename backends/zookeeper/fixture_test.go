package zookeeper

import (
	"bytes"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// originalTree is a metadata tree exactly as the original system lays it
// out (FLUSS_LAYOUT.md), with its byte-for-byte example values. Paths are
// relative to zookeeper.path.root. Parents not listed are created empty.
var originalTree = []struct {
	path string
	data string
	seq  bool // persistent sequential: path is the prefix
}{
	{path: "/coordinators/epoch", data: "7"},
	{path: "/coordinators/election"},
	{path: "/metadata/databases/db1", data: `{"version":1,"custom_properties":{"option-3":"300"},"created_time":1735538268,"modified_time":1735538268}`},
	{path: "/metadata/databases/db2", data: `{"version":1,"comment":"second-table","custom_properties":{},"created_time":-1,"modified_time":-1}`},
	{path: "/metadata/databases/db1/tables/t1", data: `{"version":1,"table_id":1234,"comment":"first-table","partition_key":["a","b"],"bucket_key":["b","c"],"bucket_count":16,"properties":{},"custom_properties":{"custom-3":"\"300\""},"remote_data_dir":"file://local/remote","created_time":1735538268,"modified_time":1735538270}`},
	{path: "/metadata/databases/db1/tables/t1/schemas/1", data: `{"version":1,"columns":[{"name":"a","data_type":{"type":"INTEGER","nullable":false},"comment":"a is first column","id":0},{"name":"b","data_type":{"type":"STRING"},"comment":"b is second column","id":1},{"name":"c","data_type":{"type":"CHAR","nullable":false,"length":10},"comment":"c is third column","id":2}],"primary_key":["a","c"],"highest_field_id":2}`},
	{path: "/metadata/databases/db1/tables/t1/partitions/p1", data: `{"version":1,"table_id":1234,"partition_id":5678,"remote_data_dir":"file://local/remote"}`},
	{path: "/metadata/databases/db1/tables/t1/partitions/p2", data: `{"version":1,"table_id":246,"partition_id":135}`},
	{path: "/metadata/databases/db2/tables/t2", data: `{"version":1,"table_id":1234,"comment":"second-table","bucket_count":32,"properties":{"option-3":"300"},"custom_properties":{},"created_time":-1,"modified_time":-1}`},
	{path: "/metadata/databases/db2/tables/t2/schemas/1", data: `{"version":1,"columns":[{"name":"a","data_type":{"type":"BIGINT"},"id":0}],"highest_field_id":0}`},
	{path: "/metadata/databases/db2/tables/pending"},                              // schema first: no data yet
	{path: "/metadata/table_seqid", data: "\x00\x00\x00\x00\x00\x00\x04\xd3"},     // 1235
	{path: "/metadata/partition_seqid", data: "\x00\x00\x00\x00\x00\x00\x16\x2f"}, // 5679
	{path: "/metadata/writer_id", data: "\x00\x00\x00\x00\x00\x00\x00\x2a"},       // 42
	{path: "/tabletservers/tables/1234", data: `{"version":1,"buckets":{"0":[1,4,5],"1":[2,3]}}`},
	{path: "/tabletservers/tables/1234/buckets/0/leader_isr", data: `{"version":2,"leader":1,"leader_epoch":10,"isr":[1,2,3],"coordinator_epoch":100,"bucket_epoch":1000,"standby_replicas":[]}`},
	{path: "/tabletservers/tables/1234/buckets/1/leader_isr", data: `{"version":1,"leader":2,"leader_epoch":3,"isr":[2,3],"coordinator_epoch":7,"bucket_epoch":4}`},
	{path: "/tabletservers/tables/1234/buckets/0/snapshots/1", data: `{"version":1,"snapshot_id":1,"log_offset":1002,"metadata_path":"oss://test/a2"}`},
	{path: "/tabletservers/tables/1234/buckets/0/remote_logs", data: `{"version":1,"remote_log_manifest_path":"oss://test/log/db/t_1/0/x.manifest","remote_log_end_offset":100}`},
	{path: "/tabletservers/partitions/5678", data: `{"version":1,"table_id":1,"buckets":{"0":[1,4,5],"1":[2,3]}}`},
	{path: "/tabletservers/partitions/5678/buckets/0/leader_isr", data: `{"version":2,"leader":1,"leader_epoch":10,"isr":[1,2,3],"coordinator_epoch":100,"bucket_epoch":1000,"standby_replicas":[]}`},
	{path: "/tabletservers/server_tags", data: `{"version":1,"server_tags":{"0":0,"1":1}}`},
	{path: "/fluss-acls/TABLE/db1.t1", data: `{"version":1,"acls":[{"principal_type":"USER","principal_name":"Mike","permission_type":"ALLOW","host":"*","operation":"ALL"}]}`},
	{path: "/fluss-acl-changes/acl_changes_", data: "TABLE:db1.t1", seq: true},
	{path: "/config/server/global", data: `{"version":1,"configs":{"log.retention":"7d"}}`},
	{path: "/config/changes/config_change_", seq: true},
}

// writeOriginalTree writes originalTree under root with the plain
// go-zookeeper client (none of the backend's code) and returns every node
// it made, path (relative) to data.
func writeOriginalTree(t *testing.T, addr, root string) map[string][]byte {
	t.Helper()
	conn, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	acl := zk.WorldACL(zk.PermAll)
	want := map[string][]byte{}
	mk := func(p string, data []byte, flags int32) string {
		got, err := conn.Create(root+p, data, flags, acl)
		if err != nil && !(errors.Is(err, zk.ErrNodeExists) && flags == 0 && data == nil) {
			t.Fatalf("fixture: create %s: %v", root+p, err)
		}
		return strings.TrimPrefix(got, root)
	}
	segs := strings.Split(strings.TrimPrefix(root, "/"), "/")
	cur := ""
	for _, s := range segs {
		cur += "/" + s
		if _, err := conn.Create(cur, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	want["/"] = nil
	for _, n := range originalTree {
		parts := strings.Split(strings.TrimPrefix(n.path, "/"), "/")
		p := ""
		for _, s := range parts[:len(parts)-1] {
			p += "/" + s
			if _, ok := want[p]; !ok {
				mk(p, nil, 0)
				want[p] = nil
			}
		}
		var data []byte
		if n.data != "" {
			data = []byte(n.data)
		}
		flags := int32(0)
		if n.seq {
			flags = zk.FlagSequence
		}
		got := mk(n.path, data, flags)
		want[got] = data
	}
	return want
}

// TestOriginalTree reads a tree written by the original layout with the
// plain client, node by node, and continues its epoch and counters.
func TestOriginalTree(t *testing.T) {
	o := testOptions(t)
	want := writeOriginalTree(t, o.Address, o.Root)
	b := open(t, o)
	ctx := testutil.Context(t, 30*time.Second)

	snap, err := b.Snapshot(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	for _, n := range snap.Nodes {
		got[n.Path] = n.Data
		if int(n.Stat.DataLength) != len(n.Data) {
			t.Errorf("%s: DataLength %d for %d bytes", n.Path, n.Stat.DataLength, len(n.Data))
		}
	}
	var paths []string
	for p := range want {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		g, ok := got[p]
		if !ok {
			t.Errorf("snapshot lacks %s", p)
		} else if !bytes.Equal(g, want[p]) {
			t.Errorf("%s: got %q, want %q", p, g, want[p])
		}
	}
	if len(got) != len(want) {
		t.Errorf("snapshot has %d nodes, the fixture %d", len(got), len(want))
	}
	if snap.Revision < snap.Nodes[len(snap.Nodes)-1].Stat.CreateRevision {
		t.Errorf("snapshot revision %d below a node's create revision", snap.Revision)
	}
	// Point reads of every node, in one batch.
	res, err := b.GetMany(ctx, paths, core.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || !bytes.Equal(r.Node.Data, want[paths[i]]) {
			t.Errorf("GetMany %s: %q, %v", paths[i], r.Node.Data, r.Err)
		}
	}
	if kids, _, err := b.Children(ctx, "/fluss-acl-changes", core.ReadOptions{}); err != nil || len(kids) != 1 || kids[0] != "acl_changes_0000000000" {
		t.Errorf("acl changes: %v %v", kids, err)
	}
	// Counters keep the 8-byte format and continue from the stored value.
	first, err := core.AllocateIDs(ctx, b, "/metadata/table_seqid", 10, core.Fence{})
	if err != nil || first != 1235 {
		t.Fatalf("table_seqid: got %d, %v; want 1235", first, err)
	}
	n, _ := core.Get(ctx, b, "/metadata/table_seqid")
	if !bytes.Equal(n.Data, []byte{0, 0, 0, 0, 0, 0, 0x04, 0xdd}) { // 1245
		t.Fatalf("table_seqid after allocation: % x", n.Data)
	}
	// The first leader continues from the stored epoch 7.
	l, err := b.Campaign(ctx, core.Candidate{ID: "c1", Address: "CLIENT://127.0.0.1:9123"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	if l.Epoch() != 8 {
		t.Fatalf("epoch %d, want 8", l.Epoch())
	}
	en, _ := core.Get(ctx, b, "/coordinators/epoch")
	if string(en.Data) != "8" || l.Fence().Token != en.Stat.Version || en.Stat.Version != 1 {
		t.Fatalf("epoch node %q version %d, fence %+v", en.Data, en.Stat.Version, l.Fence())
	}
	an, _ := core.Get(ctx, b, "/coordinators/active")
	if string(an.Data) != `{"version":2,"id":"c1","listeners":"CLIENT://127.0.0.1:9123"}` {
		t.Fatalf("active: %s", an.Data)
	}
	// A fenced catalog write: a new LeaderAndIsr lands with the leader's fence.
	lai := []byte(`{"version":2,"leader":4,"leader_epoch":11,"isr":[1,4,5],"coordinator_epoch":8,"bucket_epoch":1001,"standby_replicas":[]}`)
	if _, err := core.Set(ctx, b, "/tabletservers/tables/1234/buckets/0/leader_isr", lai, 0, l.Fence()); err != nil {
		t.Fatalf("fenced LeaderAndIsr update: %v", err)
	}
}
