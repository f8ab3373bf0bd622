package catalog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func golden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read golden %s: %v", name, err)
	}
	return b
}

// TestGoldenRoundTrip checks, for every example value of FLUSS_LAYOUT.md,
// that decoding then encoding gives back exactly the original bytes, and
// that encoding a record built in Go gives the golden bytes.
func TestGoldenRoundTrip(t *testing.T) {
	tests := []struct {
		file string
		// roundTrip decodes and re-encodes.
		roundTrip func([]byte) ([]byte, error)
	}{
		{"database_v1.json", func(b []byte) ([]byte, error) { r, err := UnmarshalDatabaseRegistration(b); return r.Marshal(), err }},
		{"database_v1_comment.json", func(b []byte) ([]byte, error) { r, err := UnmarshalDatabaseRegistration(b); return r.Marshal(), err }},
		{"table_v1.json", func(b []byte) ([]byte, error) { r, err := UnmarshalTableRegistration(b); return r.Marshal(), err }},
		{"table_v1_minimal.json", func(b []byte) ([]byte, error) { r, err := UnmarshalTableRegistration(b); return r.Marshal(), err }},
		{"schema_v1.json", func(b []byte) ([]byte, error) { r, err := UnmarshalSchema(b); return r.Marshal(), err }},
		{"schema_v1_types.json", func(b []byte) ([]byte, error) { r, err := UnmarshalSchema(b); return r.Marshal(), err }},
		{"partition_v1.json", func(b []byte) ([]byte, error) { r, err := UnmarshalPartitionRegistration(b); return r.Marshal(), err }},
		{"partition_v1_minimal.json", func(b []byte) ([]byte, error) { r, err := UnmarshalPartitionRegistration(b); return r.Marshal(), err }},
		{"table_assignment_v1.json", func(b []byte) ([]byte, error) { r, err := UnmarshalTableAssignment(b); return r.Marshal(), err }},
		{"partition_assignment_v1.json", func(b []byte) ([]byte, error) { r, err := UnmarshalPartitionAssignment(b); return r.Marshal(), err }},
		{"leader_and_isr_v2.json", func(b []byte) ([]byte, error) { r, err := UnmarshalLeaderAndIsr(b); return r.Marshal(), err }},
		{"tablet_server_v4.json", func(b []byte) ([]byte, error) {
			r, err := UnmarshalTabletServerRegistration(b)
			return r.Marshal(), err
		}},
		{"tablet_server_v4_minimal.json", func(b []byte) ([]byte, error) {
			r, err := UnmarshalTabletServerRegistration(b)
			return r.Marshal(), err
		}},
		{"coordinator_address_v2.json", func(b []byte) ([]byte, error) { r, err := UnmarshalCoordinatorAddress(b); return r.Marshal(), err }},
		{"bucket_snapshot_v1.json", func(b []byte) ([]byte, error) { r, err := UnmarshalBucketSnapshot(b); return r.Marshal(), err }},
		{"remote_log_manifest_v1.json", func(b []byte) ([]byte, error) { r, err := UnmarshalRemoteLogManifestHandle(b); return r.Marshal(), err }},
		{"resource_acl_v1.json", func(b []byte) ([]byte, error) { r, err := UnmarshalResourceACL(b); return r.Marshal(), err }},
		{"server_tags_v1.json", func(b []byte) ([]byte, error) { r, err := UnmarshalServerTags(b); return r.Marshal(), err }},
		{"config_v1.json", func(b []byte) ([]byte, error) { r, err := UnmarshalConfigJSON(b); return r.Marshal(), err }},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			want := golden(t, tt.file)
			got, err := tt.roundTrip(want)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("round trip differs\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

func i32(v int32) *int32 { return &v }

// TestMarshalEqualsGolden builds records in Go and compares their encoding
// with the original's bytes.
func TestMarshalEqualsGolden(t *testing.T) {
	tests := []struct {
		file string
		got  []byte
	}{
		{"database_v1.json", DatabaseRegistration{CustomProperties: map[string]string{"option-3": "300"}, CreatedTime: 1735538268, ModifiedTime: 1735538268}.Marshal()},
		{"database_v1_comment.json", DatabaseRegistration{Comment: "second-table", CreatedTime: -1, ModifiedTime: -1}.Marshal()},
		{"table_v1.json", TableRegistration{TableID: 1234, Comment: "first-table", PartitionKeys: []string{"a", "b"}, BucketKeys: []string{"b", "c"},
			BucketCount: 16, CustomProperties: map[string]string{"custom-3": `"300"`}, RemoteDataDir: "file://local/remote",
			CreatedTime: 1735538268, ModifiedTime: 1735538270}.Marshal()},
		{"table_v1_minimal.json", TableRegistration{TableID: 1234, Comment: "second-table", BucketCount: 32,
			Properties: map[string]string{"option-3": "300"}, CreatedTime: -1, ModifiedTime: -1}.Marshal()},
		{"schema_v1.json", Schema{Columns: []Column{
			{Name: "a", Type: DataType{Type: "INTEGER"}, Comment: "a is first column", ID: 0},
			{Name: "b", Type: DataType{Type: "STRING", Nullable: true}, Comment: "b is second column", ID: 1},
			{Name: "c", Type: DataType{Type: "CHAR", Length: i32(10)}, Comment: "c is third column", ID: 2},
		}, PrimaryKey: []string{"a", "c"}, HighestFieldID: 2}.Marshal()},
		{"partition_v1.json", PartitionRegistration{TableID: 1234, PartitionID: 5678, RemoteDataDir: "file://local/remote"}.Marshal()},
		{"partition_v1_minimal.json", PartitionRegistration{TableID: 246, PartitionID: 135}.Marshal()},
		{"table_assignment_v1.json", TableAssignment{Buckets: map[int32][]int32{1: {2, 3}, 0: {1, 4, 5}}}.Marshal()},
		{"partition_assignment_v1.json", PartitionAssignment{TableID: 1, Buckets: map[int32][]int32{0: {1, 4, 5}, 1: {2, 3}}}.Marshal()},
		{"leader_and_isr_v2.json", LeaderAndIsr{Leader: 1, LeaderEpoch: 10, ISR: []int32{1, 2, 3}, CoordinatorEpoch: 100, BucketEpoch: 1000}.Marshal()},
		{"tablet_server_v4.json", TabletServerRegistration{Listeners: "CLIENT://localhost:2345,FLUSS://127.0.0.1:2346", RegisterTimestamp: 10000,
			Rack: "cn-hangzhou-server10", CPUCores: 8, MemoryBytes: 1024}.Marshal()},
		{"coordinator_address_v2.json", CoordinatorAddress{ID: "1", Listeners: "CLIENT://localhost:1001,FLUSS://127.0.0.1:9124"}.Marshal()},
		{"bucket_snapshot_v1.json", BucketSnapshot{SnapshotID: 1, LogOffset: 1002, MetadataPath: "oss://test/a2"}.Marshal()},
		{"remote_log_manifest_v1.json", RemoteLogManifestHandle{ManifestPath: "oss://test/log/db/t_1/0/x.manifest", EndOffset: 100}.Marshal()},
		{"resource_acl_v1.json", ResourceACL{ACLs: []ACLEntry{{PrincipalType: "USER", PrincipalName: "Mike", PermissionType: "ALLOW", Host: "*", Operation: "ALL"}}}.Marshal()},
		{"server_tags_v1.json", ServerTags{Tags: map[int32]int32{1: 1, 0: 0}}.Marshal()},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			if want := golden(t, tt.file); !bytes.Equal(tt.got, want) {
				t.Fatalf("marshal differs\n got: %s\nwant: %s", tt.got, want)
			}
		})
	}
}

func TestOlderVersionsRead(t *testing.T) {
	l, err := UnmarshalLeaderAndIsr(golden(t, "leader_and_isr_v1.json"))
	if err != nil {
		t.Fatalf("leader and isr v1: %v", err)
	}
	want := LeaderAndIsr{Leader: 1, LeaderEpoch: 10, ISR: []int32{1, 2, 3}, CoordinatorEpoch: 100, BucketEpoch: 1000, StandbyReplicas: []int32{}}
	if !reflect.DeepEqual(l, want) {
		t.Fatalf("leader and isr v1: got %+v, want %+v", l, want)
	}
	if got := string(l.Marshal()); got != string(golden(t, "leader_and_isr_v2.json")) {
		t.Fatalf("v1 re-encoded as v2: got %s", got)
	}

	for file, want := range map[string]TabletServerRegistration{
		"tablet_server_v1.json": {Listeners: "CLIENT://localhost:2345", RegisterTimestamp: 10000},
		"tablet_server_v2.json": {Listeners: "CLIENT://localhost:2345,FLUSS://127.0.0.1:2346", RegisterTimestamp: 10000},
		"tablet_server_v3.json": {Listeners: "CLIENT://localhost:2345", RegisterTimestamp: 10000, Rack: "rack-1"},
	} {
		got, err := UnmarshalTabletServerRegistration(golden(t, file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if got != want {
			t.Errorf("%s: got %+v, want %+v", file, got, want)
		}
	}

	a, err := UnmarshalCoordinatorAddress(golden(t, "coordinator_address_v1.json"))
	if err != nil {
		t.Fatalf("coordinator address v1: %v", err)
	}
	if want := (CoordinatorAddress{ID: "1", Listeners: "CLIENT://localhost:1001"}); a != want {
		t.Fatalf("coordinator address v1: got %+v, want %+v", a, want)
	}
}

func TestSchemaTypes(t *testing.T) {
	s, err := UnmarshalSchema(golden(t, "schema_v1_types.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range s.Columns {
		got = append(got, c.Type.String())
	}
	want := []string{"BIGINT NOT NULL", "TIMESTAMP_WITHOUT_TIME_ZONE(6)", "DECIMAL(10, 2)"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("types: got %q, want %q", got, want)
	}
	if string(s.Columns[2].AggFunction) != `{"type":"sum"}` {
		t.Fatalf("agg function: got %s", s.Columns[2].AggFunction)
	}
}

func TestBadRecords(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"empty", func() error { _, err := UnmarshalTableRegistration(nil); return err }()},
		{"not json", func() error { _, err := UnmarshalDatabaseRegistration([]byte("{")); return err }()},
		{"future version", func() error { _, err := UnmarshalLeaderAndIsr([]byte(`{"version":3}`)); return err }()},
		{"zero version", func() error { _, err := UnmarshalSchema([]byte(`{"columns":[]}`)); return err }()},
		{"bucket key", func() error {
			_, err := UnmarshalTableAssignment([]byte(`{"version":1,"buckets":{"x":[1]}}`))
			return err
		}()},
		{"epoch", func() error { _, err := DecodeEpoch([]byte("seven")); return err }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, ErrBadRecord) {
				t.Fatalf("got %v, want ErrBadRecord", tt.err)
			}
		})
	}
	if e, err := DecodeEpoch([]byte("-1")); err != nil || e != -1 {
		t.Fatalf("DecodeEpoch(-1) = %d, %v", e, err)
	}
}

func TestEscapingMatchesOriginal(t *testing.T) {
	// The original's JSON library does not HTML-escape.
	got := string(DatabaseRegistration{Comment: "a<b & c>d", CreatedTime: 1, ModifiedTime: 1}.Marshal())
	want := `{"version":1,"comment":"a<b & c>d","custom_properties":{},"created_time":1,"modified_time":1}`
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestParseDataType(t *testing.T) {
	tests := []struct{ in, want string }{
		{"int", "INTEGER"},
		{"BIGINT NOT NULL", "BIGINT NOT NULL"},
		{"char(10)", "CHAR(10)"},
		{"DECIMAL(10, 2)", "DECIMAL(10, 2)"},
		{"timestamp(3)", "TIMESTAMP_WITHOUT_TIME_ZONE(3)"},
		{"string", "STRING"},
	}
	for _, tt := range tests {
		got, err := ParseDataType(tt.in)
		if err != nil || got.String() != tt.want {
			t.Errorf("ParseDataType(%q) = %q, %v; want %q", tt.in, got.String(), err, tt.want)
		}
	}
	for _, bad := range []string{"", "WIDGET", "CHAR(x)", "DECIMAL(2, 5)", "INT(3)", "CHAR(10"} {
		if _, err := ParseDataType(bad); err == nil || !strings.Contains(err.Error(), "type") {
			t.Errorf("ParseDataType(%q): got %v, want an error", bad, err)
		}
	}
	// A parsed type round-trips through the stored JSON.
	ty, _ := ParseDataType("char(10) not null")
	s := Schema{Columns: []Column{{Name: "c", Type: ty, ID: 0}}}
	if got := string(s.Marshal()); got != `{"version":1,"columns":[{"name":"c","data_type":{"type":"CHAR","nullable":false,"length":10},"id":0}],"highest_field_id":0}` {
		t.Fatalf("schema: %s", got)
	}
}
