package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Every record below marshals to exactly the bytes the original system
// writes (field order included; absent optional fields omitted, never null)
// and reads every version the original still reads. Marshal methods never
// fail for a record built in Go; Unmarshal functions fail with an error
// wrapping ErrBadRecord that names the record kind.

// DatabaseRegistration is the value of /metadata/databases/<db> (version 1).
type DatabaseRegistration struct {
	Comment          string            // optional: "" is omitted
	CustomProperties map[string]string // always written ({} when empty)
	CreatedTime      int64             // milliseconds since the epoch, or -1
	ModifiedTime     int64
}

// Marshal encodes the registration as the original does.
func (r DatabaseRegistration) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 1)
	if r.Comment != "" {
		w.fieldStr("comment", r.Comment)
	}
	w.fieldStrMap("custom_properties", r.CustomProperties)
	w.fieldInt("created_time", r.CreatedTime)
	w.fieldInt("modified_time", r.ModifiedTime)
	w.close('}')
	return w.bytes()
}

// UnmarshalDatabaseRegistration decodes a DatabaseRegistration v1.
func UnmarshalDatabaseRegistration(b []byte) (DatabaseRegistration, error) {
	var v struct {
		Version          int               `json:"version"`
		Comment          string            `json:"comment"`
		CustomProperties map[string]string `json:"custom_properties"`
		CreatedTime      int64             `json:"created_time"`
		ModifiedTime     int64             `json:"modified_time"`
	}
	if err := decode(b, &v, "database registration", 1, 1, &v.Version); err != nil {
		return DatabaseRegistration{}, err
	}
	return DatabaseRegistration{Comment: v.Comment, CustomProperties: nonNil(v.CustomProperties),
		CreatedTime: v.CreatedTime, ModifiedTime: v.ModifiedTime}, nil
}

// TableRegistration is the value of /metadata/databases/<db>/tables/<t>
// (version 1). A table node with empty data is a table being created.
type TableRegistration struct {
	TableID          int64
	Comment          string   // optional
	PartitionKeys    []string // optional: omitted when empty
	BucketKeys       []string // optional: omitted when empty
	BucketCount      int32
	Properties       map[string]string // always written
	CustomProperties map[string]string // always written
	RemoteDataDir    string            // optional
	CreatedTime      int64
	ModifiedTime     int64
}

// Partitioned reports whether the table has partition keys.
func (r TableRegistration) Partitioned() bool { return len(r.PartitionKeys) > 0 }

// Marshal encodes the registration as the original does.
func (r TableRegistration) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 1)
	w.fieldInt("table_id", r.TableID)
	if r.Comment != "" {
		w.fieldStr("comment", r.Comment)
	}
	if len(r.PartitionKeys) > 0 {
		w.fieldStrings("partition_key", r.PartitionKeys)
	}
	if len(r.BucketKeys) > 0 {
		w.fieldStrings("bucket_key", r.BucketKeys)
	}
	w.fieldInt("bucket_count", int64(r.BucketCount))
	w.fieldStrMap("properties", r.Properties)
	w.fieldStrMap("custom_properties", r.CustomProperties)
	if r.RemoteDataDir != "" {
		w.fieldStr("remote_data_dir", r.RemoteDataDir)
	}
	w.fieldInt("created_time", r.CreatedTime)
	w.fieldInt("modified_time", r.ModifiedTime)
	w.close('}')
	return w.bytes()
}

// UnmarshalTableRegistration decodes a TableRegistration v1.
func UnmarshalTableRegistration(b []byte) (TableRegistration, error) {
	var v struct {
		Version          int               `json:"version"`
		TableID          int64             `json:"table_id"`
		Comment          string            `json:"comment"`
		PartitionKey     []string          `json:"partition_key"`
		BucketKey        []string          `json:"bucket_key"`
		BucketCount      int32             `json:"bucket_count"`
		Properties       map[string]string `json:"properties"`
		CustomProperties map[string]string `json:"custom_properties"`
		RemoteDataDir    string            `json:"remote_data_dir"`
		CreatedTime      int64             `json:"created_time"`
		ModifiedTime     int64             `json:"modified_time"`
	}
	if err := decode(b, &v, "table registration", 1, 1, &v.Version); err != nil {
		return TableRegistration{}, err
	}
	return TableRegistration{TableID: v.TableID, Comment: v.Comment, PartitionKeys: v.PartitionKey,
		BucketKeys: v.BucketKey, BucketCount: v.BucketCount, Properties: nonNil(v.Properties),
		CustomProperties: nonNil(v.CustomProperties), RemoteDataDir: v.RemoteDataDir,
		CreatedTime: v.CreatedTime, ModifiedTime: v.ModifiedTime}, nil
}

// DataType is a column's type as the original serialises it:
// {"type":"INTEGER","nullable":false}, {"type":"CHAR","length":10},
// {"type":"DECIMAL","precision":10,"scale":2}, and nested types
// (ARRAY element_type, MAP key_type/value_type, ROW fields).
type DataType struct {
	Type     string // the type root: "INTEGER", "STRING", "CHAR", ...
	Nullable bool   // written only when false
	// Length, Precision and Scale are the type's parameters; nil when the
	// type has none.
	Length    *int32
	Precision *int32
	Scale     *int32
	// ElementType (ARRAY), KeyType and ValueType (MAP) and Fields (ROW)
	// describe nested types.
	ElementType *DataType
	KeyType     *DataType
	ValueType   *DataType
	Fields      []RowField
}

// RowField is one field of a ROW type.
type RowField struct {
	Name        string
	Type        DataType
	Description string // optional
	FieldID     *int32 // optional
}

func (t DataType) write(w *jw) {
	w.open('{')
	w.fieldStr("type", t.Type)
	if !t.Nullable {
		w.fieldBool("nullable", false)
	}
	if t.Length != nil {
		w.fieldInt("length", int64(*t.Length))
	}
	if t.Precision != nil {
		w.fieldInt("precision", int64(*t.Precision))
	}
	if t.Scale != nil {
		w.fieldInt("scale", int64(*t.Scale))
	}
	if t.ElementType != nil {
		w.key("element_type")
		t.ElementType.write(w)
		w.val()
	}
	if t.KeyType != nil {
		w.key("key_type")
		t.KeyType.write(w)
		w.val()
	}
	if t.ValueType != nil {
		w.key("value_type")
		t.ValueType.write(w)
		w.val()
	}
	if t.Fields != nil {
		w.key("fields")
		w.open('[')
		for _, f := range t.Fields {
			w.sep()
			w.open('{')
			w.fieldStr("name", f.Name)
			w.key("field_type")
			f.Type.write(w)
			w.val()
			if f.Description != "" {
				w.fieldStr("description", f.Description)
			}
			if f.FieldID != nil {
				w.fieldInt("field_id", int64(*f.FieldID))
			}
			w.close('}')
		}
		w.close(']')
		w.val()
	}
	w.close('}')
}

// String renders the type as SQL-like text: "INT NOT NULL", "CHAR(10)",
// "DECIMAL(10, 2)".
func (t DataType) String() string {
	var b strings.Builder
	b.WriteString(t.Type)
	switch {
	case t.Precision != nil && t.Scale != nil:
		fmt.Fprintf(&b, "(%d, %d)", *t.Precision, *t.Scale)
	case t.Length != nil:
		fmt.Fprintf(&b, "(%d)", *t.Length)
	case t.Precision != nil:
		fmt.Fprintf(&b, "(%d)", *t.Precision)
	}
	if t.ElementType != nil {
		fmt.Fprintf(&b, "<%s>", t.ElementType)
	}
	if t.KeyType != nil && t.ValueType != nil {
		fmt.Fprintf(&b, "<%s, %s>", t.KeyType, t.ValueType)
	}
	if !t.Nullable {
		b.WriteString(" NOT NULL")
	}
	return b.String()
}

type dataTypeWire struct {
	Type        string          `json:"type"`
	Nullable    *bool           `json:"nullable"`
	Length      *int32          `json:"length"`
	Precision   *int32          `json:"precision"`
	Scale       *int32          `json:"scale"`
	ElementType *dataTypeWire   `json:"element_type"`
	KeyType     *dataTypeWire   `json:"key_type"`
	ValueType   *dataTypeWire   `json:"value_type"`
	Fields      []rowFieldWire  `json:"fields"`
	Extra       json.RawMessage `json:"-"`
}

type rowFieldWire struct {
	Name        string       `json:"name"`
	FieldType   dataTypeWire `json:"field_type"`
	Description string       `json:"description"`
	FieldID     *int32       `json:"field_id"`
}

func (v *dataTypeWire) toType() DataType {
	t := DataType{Type: v.Type, Nullable: v.Nullable == nil || *v.Nullable,
		Length: v.Length, Precision: v.Precision, Scale: v.Scale}
	if v.ElementType != nil {
		e := v.ElementType.toType()
		t.ElementType = &e
	}
	if v.KeyType != nil {
		k := v.KeyType.toType()
		t.KeyType = &k
	}
	if v.ValueType != nil {
		x := v.ValueType.toType()
		t.ValueType = &x
	}
	if v.Fields != nil {
		t.Fields = make([]RowField, len(v.Fields))
		for i, f := range v.Fields {
			t.Fields[i] = RowField{Name: f.Name, Type: f.FieldType.toType(), Description: f.Description, FieldID: f.FieldID}
		}
	}
	return t
}

// Column is one column of a Schema.
type Column struct {
	Name    string
	Type    DataType
	Comment string // optional
	// AggFunction is the aggregate function of an aggregation column
	// ({"type":"sum"}), kept as the raw JSON object; nil when absent.
	AggFunction json.RawMessage
	ID          int32
}

// Schema is the value of .../tables/<t>/schemas/<schemaId> (version 1).
type Schema struct {
	Columns             []Column
	PrimaryKey          []string // optional: omitted when empty
	AutoIncrementColumn string   // optional
	HighestFieldID      int32
}

// Column returns the column named name.
func (s Schema) Column(name string) (Column, bool) {
	for _, c := range s.Columns {
		if c.Name == name {
			return c, true
		}
	}
	return Column{}, false
}

// Marshal encodes the schema as the original does.
func (s Schema) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 1)
	w.key("columns")
	w.open('[')
	for _, c := range s.Columns {
		w.sep()
		w.open('{')
		w.fieldStr("name", c.Name)
		w.key("data_type")
		c.Type.write(&w)
		w.val()
		if c.Comment != "" {
			w.fieldStr("comment", c.Comment)
		}
		if len(c.AggFunction) > 0 {
			w.fieldRaw("agg_function", compactJSON(c.AggFunction))
		}
		w.fieldInt("id", int64(c.ID))
		w.close('}')
	}
	w.close(']')
	w.val()
	if len(s.PrimaryKey) > 0 {
		w.fieldStrings("primary_key", s.PrimaryKey)
	}
	if s.AutoIncrementColumn != "" {
		w.fieldStr("auto_increment_column", s.AutoIncrementColumn)
	}
	w.fieldInt("highest_field_id", int64(s.HighestFieldID))
	w.close('}')
	return w.bytes()
}

// UnmarshalSchema decodes a Schema v1.
func UnmarshalSchema(b []byte) (Schema, error) {
	var v struct {
		Version int `json:"version"`
		Columns []struct {
			Name        string          `json:"name"`
			DataType    dataTypeWire    `json:"data_type"`
			Comment     string          `json:"comment"`
			AggFunction json.RawMessage `json:"agg_function"`
			ID          *int32          `json:"id"`
		} `json:"columns"`
		PrimaryKey          []string `json:"primary_key"`
		AutoIncrementColumn string   `json:"auto_increment_column"`
		HighestFieldID      *int32   `json:"highest_field_id"`
	}
	if err := decode(b, &v, "schema", 1, 1, &v.Version); err != nil {
		return Schema{}, err
	}
	s := Schema{PrimaryKey: v.PrimaryKey, AutoIncrementColumn: v.AutoIncrementColumn}
	highest := int32(-1)
	for i, c := range v.Columns {
		id := int32(i)
		if c.ID != nil {
			id = *c.ID
		}
		if id > highest {
			highest = id
		}
		s.Columns = append(s.Columns, Column{Name: c.Name, Type: c.DataType.toType(), Comment: c.Comment,
			AggFunction: c.AggFunction, ID: id})
	}
	if v.HighestFieldID != nil {
		s.HighestFieldID = *v.HighestFieldID
	} else {
		s.HighestFieldID = highest
	}
	return s, nil
}

// PartitionRegistration is the value of .../tables/<t>/partitions/<name>
// (version 1).
type PartitionRegistration struct {
	TableID       int64
	PartitionID   int64
	RemoteDataDir string // optional
}

// Marshal encodes the registration as the original does.
func (r PartitionRegistration) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 1)
	w.fieldInt("table_id", r.TableID)
	w.fieldInt("partition_id", r.PartitionID)
	if r.RemoteDataDir != "" {
		w.fieldStr("remote_data_dir", r.RemoteDataDir)
	}
	w.close('}')
	return w.bytes()
}

// UnmarshalPartitionRegistration decodes a PartitionRegistration v1.
func UnmarshalPartitionRegistration(b []byte) (PartitionRegistration, error) {
	var v struct {
		Version       int    `json:"version"`
		TableID       int64  `json:"table_id"`
		PartitionID   int64  `json:"partition_id"`
		RemoteDataDir string `json:"remote_data_dir"`
	}
	if err := decode(b, &v, "partition registration", 1, 1, &v.Version); err != nil {
		return PartitionRegistration{}, err
	}
	return PartitionRegistration{TableID: v.TableID, PartitionID: v.PartitionID, RemoteDataDir: v.RemoteDataDir}, nil
}

// TableAssignment is the value of /tabletservers/tables/<tableId>
// (version 1): each bucket's replicas (tablet server ids).
type TableAssignment struct {
	Buckets map[int32][]int32
}

// Marshal encodes the assignment as the original does (buckets in numeric
// order).
func (a TableAssignment) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 1)
	w.fieldBuckets("buckets", a.Buckets)
	w.close('}')
	return w.bytes()
}

// UnmarshalTableAssignment decodes a TableAssignment v1.
func UnmarshalTableAssignment(b []byte) (TableAssignment, error) {
	var v struct {
		Version int                `json:"version"`
		Buckets map[string][]int32 `json:"buckets"`
	}
	if err := decode(b, &v, "table assignment", 1, 1, &v.Version); err != nil {
		return TableAssignment{}, err
	}
	buckets, err := parseBuckets(v.Buckets, "table assignment")
	return TableAssignment{Buckets: buckets}, err
}

// PartitionAssignment is the value of /tabletservers/partitions/<id>
// (version 1).
type PartitionAssignment struct {
	TableID int64
	Buckets map[int32][]int32
}

// Marshal encodes the assignment as the original does.
func (a PartitionAssignment) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 1)
	w.fieldInt("table_id", a.TableID)
	w.fieldBuckets("buckets", a.Buckets)
	w.close('}')
	return w.bytes()
}

// UnmarshalPartitionAssignment decodes a PartitionAssignment v1.
func UnmarshalPartitionAssignment(b []byte) (PartitionAssignment, error) {
	var v struct {
		Version int                `json:"version"`
		TableID int64              `json:"table_id"`
		Buckets map[string][]int32 `json:"buckets"`
	}
	if err := decode(b, &v, "partition assignment", 1, 1, &v.Version); err != nil {
		return PartitionAssignment{}, err
	}
	buckets, err := parseBuckets(v.Buckets, "partition assignment")
	return PartitionAssignment{TableID: v.TableID, Buckets: buckets}, err
}

// NoLeader is the leader id of a bucket without a leader.
const NoLeader int32 = -1

// LeaderAndIsr is the value of .../buckets/<b>/leader_isr. It is written as
// version 2; version 1 (without standby_replicas) is read.
type LeaderAndIsr struct {
	Leader           int32
	LeaderEpoch      int32
	ISR              []int32
	CoordinatorEpoch int32
	BucketEpoch      int32
	StandbyReplicas  []int32 // always written ([] when empty)
}

// Marshal encodes the record as version 2.
func (l LeaderAndIsr) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 2)
	w.fieldInt("leader", int64(l.Leader))
	w.fieldInt("leader_epoch", int64(l.LeaderEpoch))
	w.fieldInts("isr", l.ISR)
	w.fieldInt("coordinator_epoch", int64(l.CoordinatorEpoch))
	w.fieldInt("bucket_epoch", int64(l.BucketEpoch))
	w.fieldInts("standby_replicas", l.StandbyReplicas)
	w.close('}')
	return w.bytes()
}

// UnmarshalLeaderAndIsr decodes a LeaderAndIsr v1 or v2.
func UnmarshalLeaderAndIsr(b []byte) (LeaderAndIsr, error) {
	var v struct {
		Version          int     `json:"version"`
		Leader           int32   `json:"leader"`
		LeaderEpoch      int32   `json:"leader_epoch"`
		ISR              []int32 `json:"isr"`
		CoordinatorEpoch int32   `json:"coordinator_epoch"`
		BucketEpoch      int32   `json:"bucket_epoch"`
		StandbyReplicas  []int32 `json:"standby_replicas"`
	}
	if err := decode(b, &v, "leader and isr", 1, 2, &v.Version); err != nil {
		return LeaderAndIsr{}, err
	}
	if v.ISR == nil {
		v.ISR = []int32{}
	}
	if v.StandbyReplicas == nil {
		v.StandbyReplicas = []int32{}
	}
	return LeaderAndIsr{Leader: v.Leader, LeaderEpoch: v.LeaderEpoch, ISR: v.ISR,
		CoordinatorEpoch: v.CoordinatorEpoch, BucketEpoch: v.BucketEpoch, StandbyReplicas: v.StandbyReplicas}, nil
}

// TabletServerRegistration is the value of the ephemeral
// /tabletservers/ids/<id>. It is written as version 4; versions 1 to 3 are
// read (version 1 had host and port instead of listeners: they are read as
// the listener "CLIENT://host:port").
type TabletServerRegistration struct {
	Listeners         string // "CLIENT://host:port,FLUSS://host:port"
	RegisterTimestamp int64
	Rack              string  // optional
	CPUCores          float64 // optional: 0 is omitted
	MemoryBytes       int64   // optional: 0 is omitted
}

// Marshal encodes the registration as version 4.
func (r TabletServerRegistration) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 4)
	w.fieldStr("listeners", r.Listeners)
	w.fieldInt("register_timestamp", r.RegisterTimestamp)
	if r.Rack != "" {
		w.fieldStr("rack", r.Rack)
	}
	if r.CPUCores != 0 {
		w.fieldDouble("cpu_cores", r.CPUCores)
	}
	if r.MemoryBytes != 0 {
		w.fieldInt("memory_bytes", r.MemoryBytes)
	}
	w.close('}')
	return w.bytes()
}

// UnmarshalTabletServerRegistration decodes versions 1 to 4.
func UnmarshalTabletServerRegistration(b []byte) (TabletServerRegistration, error) {
	var v struct {
		Version           int     `json:"version"`
		Host              string  `json:"host"`
		Port              int     `json:"port"`
		Listeners         string  `json:"listeners"`
		RegisterTimestamp int64   `json:"register_timestamp"`
		Rack              string  `json:"rack"`
		CPUCores          float64 `json:"cpu_cores"`
		MemoryBytes       int64   `json:"memory_bytes"`
	}
	if err := decode(b, &v, "tablet server registration", 1, 4, &v.Version); err != nil {
		return TabletServerRegistration{}, err
	}
	r := TabletServerRegistration{Listeners: v.Listeners, RegisterTimestamp: v.RegisterTimestamp,
		Rack: v.Rack, CPUCores: v.CPUCores, MemoryBytes: v.MemoryBytes}
	if v.Version == 1 {
		r.Listeners = "CLIENT://" + v.Host + ":" + strconv.Itoa(v.Port)
	}
	return r, nil
}

// CoordinatorAddress is the value of /coordinators/active (version 2;
// version 1 with host and port is read as the listener CLIENT://host:port).
type CoordinatorAddress struct {
	ID        string
	Listeners string
}

// Marshal encodes the address as version 2.
func (a CoordinatorAddress) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 2)
	w.fieldStr("id", a.ID)
	w.fieldStr("listeners", a.Listeners)
	w.close('}')
	return w.bytes()
}

// UnmarshalCoordinatorAddress decodes versions 1 and 2.
func UnmarshalCoordinatorAddress(b []byte) (CoordinatorAddress, error) {
	var v struct {
		Version   int    `json:"version"`
		ID        string `json:"id"`
		Host      string `json:"host"`
		Port      int    `json:"port"`
		Listeners string `json:"listeners"`
	}
	if err := decode(b, &v, "coordinator address", 1, 2, &v.Version); err != nil {
		return CoordinatorAddress{}, err
	}
	a := CoordinatorAddress{ID: v.ID, Listeners: v.Listeners}
	if v.Version == 1 {
		a.Listeners = "CLIENT://" + v.Host + ":" + strconv.Itoa(v.Port)
	}
	return a, nil
}

// BucketSnapshot is the value of .../buckets/<b>/snapshots/<id> (version 1).
type BucketSnapshot struct {
	SnapshotID   int64
	LogOffset    int64
	MetadataPath string
}

// Marshal encodes the snapshot handle as the original does.
func (s BucketSnapshot) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 1)
	w.fieldInt("snapshot_id", s.SnapshotID)
	w.fieldInt("log_offset", s.LogOffset)
	w.fieldStr("metadata_path", s.MetadataPath)
	w.close('}')
	return w.bytes()
}

// UnmarshalBucketSnapshot decodes a BucketSnapshot v1.
func UnmarshalBucketSnapshot(b []byte) (BucketSnapshot, error) {
	var v struct {
		Version      int    `json:"version"`
		SnapshotID   int64  `json:"snapshot_id"`
		LogOffset    int64  `json:"log_offset"`
		MetadataPath string `json:"metadata_path"`
	}
	if err := decode(b, &v, "bucket snapshot", 1, 1, &v.Version); err != nil {
		return BucketSnapshot{}, err
	}
	return BucketSnapshot{SnapshotID: v.SnapshotID, LogOffset: v.LogOffset, MetadataPath: v.MetadataPath}, nil
}

// RemoteLogManifestHandle is the value of .../buckets/<b>/remote_logs
// (version 1).
type RemoteLogManifestHandle struct {
	ManifestPath string
	EndOffset    int64
}

// Marshal encodes the handle as the original does.
func (h RemoteLogManifestHandle) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 1)
	w.fieldStr("remote_log_manifest_path", h.ManifestPath)
	w.fieldInt("remote_log_end_offset", h.EndOffset)
	w.close('}')
	return w.bytes()
}

// UnmarshalRemoteLogManifestHandle decodes a RemoteLogManifestHandle v1.
func UnmarshalRemoteLogManifestHandle(b []byte) (RemoteLogManifestHandle, error) {
	var v struct {
		Version      int    `json:"version"`
		ManifestPath string `json:"remote_log_manifest_path"`
		EndOffset    int64  `json:"remote_log_end_offset"`
	}
	if err := decode(b, &v, "remote log manifest handle", 1, 1, &v.Version); err != nil {
		return RemoteLogManifestHandle{}, err
	}
	return RemoteLogManifestHandle{ManifestPath: v.ManifestPath, EndOffset: v.EndOffset}, nil
}

// ACLEntry is one access control entry of a ResourceACL.
type ACLEntry struct {
	PrincipalType  string `json:"principal_type"`  // "USER"
	PrincipalName  string `json:"principal_name"`  // "Mike"
	PermissionType string `json:"permission_type"` // "ALLOW" or "DENY"
	Host           string `json:"host"`            // "*"
	Operation      string `json:"operation"`       // "ALL", "READ", ...
}

// ResourceACL is the value of /fluss-acls/<resourceType>/<resourceName>
// (version 1).
type ResourceACL struct {
	ACLs []ACLEntry
}

// Marshal encodes the ACL list as the original does.
func (r ResourceACL) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 1)
	w.key("acls")
	w.open('[')
	for _, e := range r.ACLs {
		w.sep()
		w.open('{')
		w.fieldStr("principal_type", e.PrincipalType)
		w.fieldStr("principal_name", e.PrincipalName)
		w.fieldStr("permission_type", e.PermissionType)
		w.fieldStr("host", e.Host)
		w.fieldStr("operation", e.Operation)
		w.close('}')
	}
	w.close(']')
	w.val()
	w.close('}')
	return w.bytes()
}

// UnmarshalResourceACL decodes a ResourceACL v1.
func UnmarshalResourceACL(b []byte) (ResourceACL, error) {
	var v struct {
		Version int        `json:"version"`
		ACLs    []ACLEntry `json:"acls"`
	}
	if err := decode(b, &v, "resource acl", 1, 1, &v.Version); err != nil {
		return ResourceACL{}, err
	}
	return ResourceACL{ACLs: v.ACLs}, nil
}

// ServerTags is the value of /tabletservers/server_tags (version 1): a tag
// per tablet server id (0 or 1 in the original: permanent/temporary
// offline).
type ServerTags struct {
	Tags map[int32]int32
}

// Marshal encodes the tags as the original does (ids in numeric order).
func (s ServerTags) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 1)
	w.key("server_tags")
	w.open('{')
	for _, id := range sortedKeys(s.Tags) {
		w.fieldInt(strconv.FormatInt(int64(id), 10), int64(s.Tags[id]))
	}
	w.close('}')
	w.val()
	w.close('}')
	return w.bytes()
}

// UnmarshalServerTags decodes a ServerTags v1.
func UnmarshalServerTags(b []byte) (ServerTags, error) {
	var v struct {
		Version int              `json:"version"`
		Tags    map[string]int32 `json:"server_tags"`
	}
	if err := decode(b, &v, "server tags", 1, 1, &v.Version); err != nil {
		return ServerTags{}, err
	}
	out := ServerTags{Tags: map[int32]int32{}}
	for k, t := range v.Tags {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil {
			return ServerTags{}, formatError("server tags", "server id %q is not an integer", k)
		}
		out.Tags[int32(id)] = t
	}
	return out, nil
}

// ConfigJSON is the value of /config/server/global (version 1): dynamic
// configuration entries.
type ConfigJSON struct {
	Configs map[string]string
}

// Marshal encodes the configuration as the original does.
func (c ConfigJSON) Marshal() []byte {
	var w jw
	w.open('{')
	w.fieldInt("version", 1)
	w.fieldStrMap("configs", c.Configs)
	w.close('}')
	return w.bytes()
}

// UnmarshalConfigJSON decodes a ConfigJson v1.
func UnmarshalConfigJSON(b []byte) (ConfigJSON, error) {
	var v struct {
		Version int               `json:"version"`
		Configs map[string]string `json:"configs"`
	}
	if err := decode(b, &v, "config", 1, 1, &v.Version); err != nil {
		return ConfigJSON{}, err
	}
	return ConfigJSON{Configs: nonNil(v.Configs)}, nil
}

// DecodeEpoch decodes /coordinators/epoch.
func DecodeEpoch(b []byte) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, formatError("coordinator epoch", "%q is not a decimal integer", string(b))
	}
	return n, nil
}

func decode(b []byte, into any, what string, minVersion, maxVersion int, version *int) error {
	if len(b) == 0 {
		return formatError(what, "empty value")
	}
	if err := json.Unmarshal(b, into); err != nil {
		return formatError(what, "%v", err)
	}
	if *version < minVersion || *version > maxVersion {
		if minVersion == maxVersion {
			return formatError(what, "version %d, want %d", *version, minVersion)
		}
		return formatError(what, "version %d, want %d to %d", *version, minVersion, maxVersion)
	}
	return nil
}

func compactJSON(raw json.RawMessage) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
