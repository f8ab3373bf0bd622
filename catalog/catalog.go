package catalog

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/metaplane/metaplane/core"
)

// Options configure a Catalog.
type Options struct {
	// Fence is put on every write: the leadership's fence. The zero Fence
	// writes unfenced (tests and tools only).
	Fence core.Fence
	// Epoch is the coordinator epoch written into LeaderAndIsr records
	// (coordinator_epoch). Usually the leadership's epoch.
	Epoch int64
	// Reader serves the catalog's reads; nil means the backend itself. The
	// coordinator passes its metadata image here.
	Reader core.Reader
	// OnWrite, when set, is called after every successful write with its
	// ops and result (before the operation returns), so an image can apply
	// the writer's own changes at once (read-your-writes). It must not
	// retain ops.
	OnWrite func(ops []core.Op, res core.TxnResult)
	// IDBlockSize is the number of ids one counter write reserves
	// (coordinator.raft.id-block-size); default 1000.
	IDBlockSize int64
	// DefaultBucketCount is the bucket count of a table created without
	// one; default 1.
	DefaultBucketCount int32
	// DefaultReplicationFactor is the replication factor of a table created
	// without one; default 3. It is capped at the number of registered
	// tablet servers (see CreateTable).
	DefaultReplicationFactor int
	// MaxBucketNum is max.bucket.num, the most buckets of one table (and
	// of each partition of a partitioned table); default
	// DefaultMaxBucketNum.
	MaxBucketNum int32
	// MaxPartitionNum is max.partition.num, the most partitions of one
	// partitioned table; default DefaultMaxPartitionNum.
	MaxPartitionNum int
	// Now returns the current time; default time.Now.
	Now func() time.Time
	// MaxRetries bounds the retries of version-checked read-modify-write
	// operations (ACLs, config, server tags); default 20.
	MaxRetries int
}

// Catalog performs the catalog's multi-key operations on a backend, each
// as one fenced transaction, and reads the catalog. Build one per
// leadership (its fence and id blocks belong to that leadership).
//
// Records returned by reads may share maps and slices with the catalog's
// decode cache: treat them as read-only.
//
// It is safe for concurrent use. Every method's ctx bounds the backend
// calls it makes; cancelling it abandons the operation, and a write whose
// transaction was already sent may or may not have been applied.
type Catalog struct {
	cache      decodeCache
	b          core.MetadataBackend
	r          core.Reader
	opts       Options
	tableIDs   *core.BlockAllocator
	partIDs    *core.BlockAllocator
	writerIDs  *core.BlockAllocator
	maxRetries int
}

// New returns a Catalog writing to b with opts.
func New(b core.MetadataBackend, opts Options) *Catalog {
	if opts.IDBlockSize < 1 {
		opts.IDBlockSize = 1000
	}
	if opts.DefaultBucketCount < 1 {
		opts.DefaultBucketCount = 1
	}
	if opts.DefaultReplicationFactor < 1 {
		opts.DefaultReplicationFactor = 3
	}
	if opts.MaxBucketNum < 1 {
		opts.MaxBucketNum = DefaultMaxBucketNum
	}
	if opts.MaxPartitionNum < 1 {
		opts.MaxPartitionNum = DefaultMaxPartitionNum
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxRetries < 1 {
		opts.MaxRetries = 20
	}
	r := opts.Reader
	if r == nil {
		r = b
	}
	return &Catalog{
		b: b, r: r, opts: opts, maxRetries: opts.MaxRetries,
		tableIDs:  core.NewBlockAllocator(b, TableSeqIDPath, opts.IDBlockSize),
		partIDs:   core.NewBlockAllocator(b, PartitionSeqIDPath, opts.IDBlockSize),
		writerIDs: core.NewBlockAllocator(b, WriterIDPath, opts.IDBlockSize),
	}
}

// Backend returns the backend the catalog writes to.
func (c *Catalog) Backend() core.MetadataBackend { return c.b }

// Fence returns the fence the catalog puts on its writes.
func (c *Catalog) Fence() core.Fence { return c.opts.Fence }

// txn writes ops in one fenced transaction, with ctx's request record (see
// WithRequest) as its last op. Without ops and without a record it writes
// nothing. Errors: ErrDuplicateRequest when the record exists already,
// backend errors.
func (c *Catalog) txn(ctx context.Context, ops []core.Op) (core.TxnResult, error) {
	if op, ok := c.requestOp(ctx); ok {
		ops = append(ops[:len(ops):len(ops)], op)
		res, err := c.b.Txn(ctx, ops, core.TxnOptions{Fence: c.opts.Fence})
		if core.FailedOpIndex(err) == len(ops)-1 && errors.Is(err, core.ErrNodeExists) {
			return res, fmt.Errorf("%w: %s", ErrDuplicateRequest, requestOf(ctx).ID)
		}
		if err != nil {
			return res, err
		}
		markCommitted(ctx)
		if c.opts.OnWrite != nil {
			c.opts.OnWrite(ops, res)
		}
		return res, nil
	}
	if len(ops) == 0 {
		return core.TxnResult{}, nil
	}
	res, err := c.b.Txn(ctx, ops, core.TxnOptions{Fence: c.opts.Fence})
	if err != nil {
		return res, err
	}
	if c.opts.OnWrite != nil {
		c.opts.OnWrite(ops, res)
	}
	return res, nil
}

func (c *Catalog) nowMillis() int64 { return c.opts.Now().UnixMilli() }

// opErr reports whether err is op index's failure with sentinel.
func opErr(err error, index int, sentinel error) bool {
	return core.FailedOpIndex(err) == index && errors.Is(err, sentinel)
}

// ---------------------------------------------------------------- databases

// CreateDatabase registers database name. It returns the revision of the
// write (0 when ignoreIfExists and the database already existed). Errors:
// ErrInvalidArgument (bad name), *ExistsError unless ignoreIfExists, and the
// backend's errors (ErrFenced, ErrNotLeader, ErrUnavailable, ...).
func (c *Catalog) CreateDatabase(ctx context.Context, name string, reg DatabaseRegistration, ignoreIfExists bool) (int64, error) {
	if err := ValidateName(KindDatabase, name); err != nil {
		return 0, err
	}
	now := c.nowMillis()
	if reg.CreatedTime == 0 {
		reg.CreatedTime = now
	}
	if reg.ModifiedTime == 0 {
		reg.ModifiedTime = reg.CreatedTime
	}
	res, err := c.txn(ctx, []core.Op{core.CreateOp(DatabasePath(name), reg.Marshal(), core.Persistent).WithParents()})
	if opErr(err, 0, core.ErrNodeExists) {
		if ignoreIfExists {
			return 0, nil
		}
		return 0, exists(KindDatabase, name)
	}
	if err != nil {
		if errors.Is(err, core.ErrTooLarge) {
			return 0, tooLarge(err, KindDatabase, name, "its comment and properties")
		}
		return 0, fmt.Errorf("create database %s: %w", name, err)
	}
	return res.Revision, nil
}

// DropDatabase deletes database name. A database that still has tables is
// refused with *NotEmptyError unless cascade, which drops its tables (with
// their partitions, assignments and buckets) in the same transaction.
// Errors: *NotFoundError unless ignoreIfNotExists, *NotEmptyError, backend
// errors.
func (c *Catalog) DropDatabase(ctx context.Context, name string, ignoreIfNotExists, cascade bool) (int64, error) {
	if err := ValidateName(KindDatabase, name); err != nil {
		return 0, err
	}
	for attempt := 0; ; attempt++ {
		snap, err := c.b.Snapshot(ctx, DatabasePath(name))
		if err != nil {
			return 0, fmt.Errorf("drop database %s: %w", name, err)
		}
		if len(snap.Nodes) == 0 {
			if ignoreIfNotExists {
				return 0, nil
			}
			return 0, notFound(KindDatabase, name)
		}
		var tables []string
		prefix := TablesPath(name) + "/"
		for _, n := range snap.Nodes {
			if rest, ok := strings.CutPrefix(n.Path, prefix); ok && !strings.Contains(rest, "/") {
				tables = append(tables, rest)
			}
		}
		if len(tables) > 0 && !cascade {
			return 0, &NotEmptyError{Kind: KindDatabase, Name: name, Detail: plural(len(tables), "table")}
		}
		var ops []core.Op
		for _, t := range tables {
			more, err := c.assignmentDeletes(ctx, snap.Nodes, name, t)
			if err != nil {
				return 0, err
			}
			ops = append(ops, more...)
		}
		ops = append(ops, deletesOf(snap.Nodes)...)
		res, err := c.txn(ctx, ops)
		if err != nil && retryableDrop(err) && attempt < c.maxRetries {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("drop database %s: %w", name, err)
		}
		return res.Revision, nil
	}
}

// GetDatabase reads database name's registration. Errors: *NotFoundError,
// ErrBadRecord, backend errors.
func (c *Catalog) GetDatabase(ctx context.Context, name string) (DatabaseRegistration, error) {
	n, err := core.Get(ctx, c.r, DatabasePath(name))
	if errors.Is(err, core.ErrNotFound) || errors.Is(err, core.ErrInvalidPath) {
		return DatabaseRegistration{}, notFound(KindDatabase, name)
	}
	if err != nil {
		return DatabaseRegistration{}, err
	}
	return UnmarshalDatabaseRegistration(n.Data)
}

// ListDatabases returns the databases' names, sorted.
func (c *Catalog) ListDatabases(ctx context.Context) ([]string, error) {
	names, _, err := c.r.Children(ctx, DatabasesPath, core.ReadOptions{})
	if errors.Is(err, core.ErrNotFound) {
		return []string{}, nil
	}
	return names, err
}

// ------------------------------------------------------------------- tables

// TableSpec describes a table to create.
type TableSpec struct {
	Schema        Schema   // columns (ids are assigned 0..n-1) and primary key
	PartitionKeys []string // columns; a partitioned table gets its buckets per partition
	// BucketKeys default to the primary key without the partition keys.
	BucketKeys       []string
	BucketCount      int32 // 0: Options.DefaultBucketCount
	Comment          string
	Properties       map[string]string
	CustomProperties map[string]string
	RemoteDataDir    string
	// ReplicationFactor is the number of replicas per bucket; 0 means
	// Options.DefaultReplicationFactor. It is capped at the number of
	// registered tablet servers; with none registered, buckets are created
	// without replicas and without a leader (leader -1) until an operator
	// reassigns them.
	ReplicationFactor int
}

// ReplicationFactorProperty is the table property holding the table's
// replication factor (set by CreateTable; read by CreatePartition).
const ReplicationFactorProperty = "table.replication.factor"

// TableInfo is a table as the catalog holds it.
type TableInfo struct {
	Database     string
	Table        string
	Registration TableRegistration
	SchemaID     int32
	Schema       Schema
	// Revision is the store revision of the table node's creation.
	Revision int64
	// Existed is set by CreateTable with ignoreIfExists when the table
	// existed already (the info is the existing table's; nothing was
	// written).
	Existed bool
}

// Name is "db.table".
func (t TableInfo) Name() string { return t.Database + "." + t.Table }

// validateSpec normalises spec (column ids, bucket keys, bucket count,
// replication factor) and reports the first problem, naming the table, the
// field and the limit. It only reads: servers is the number of registered
// tablet servers.
func (c *Catalog) validateSpec(name string, spec *TableSpec, servers int) error {
	s := &spec.Schema
	if len(s.Columns) == 0 {
		return invalidField("columns", "table %s: no columns", name)
	}
	seen := map[string]bool{}
	lower := map[string]string{} // lower-cased name -> the name as given
	for i := range s.Columns {
		col := &s.Columns[i]
		if err := validateColumnName(name, i, col.Name); err != nil {
			return err
		}
		if first, dup := lower[strings.ToLower(col.Name)]; dup {
			if first == col.Name {
				return invalidField("columns", "table %s: column %q appears twice", name, col.Name)
			}
			return invalidField("columns", "table %s: columns %q and %q differ only in case: column names must be unique ignoring case", name, first, col.Name)
		}
		lower[strings.ToLower(col.Name)] = col.Name
		seen[col.Name] = true
		if col.Type.Type == "" {
			return invalidField("columns", "table %s: column %q has no type", name, col.Name)
		}
		if err := ValidateType(col.Type); err != nil {
			return invalidField("columns", "table %s: column %q: %v", name, col.Name, err)
		}
		col.ID = int32(i)
	}
	s.HighestFieldID = int32(len(s.Columns) - 1)
	check := func(field, what string, cols []string) error {
		dup := map[string]bool{}
		for _, k := range cols {
			if !seen[k] {
				return invalidField(field, "table %s: %s column %q is not a column of the table", name, what, k)
			}
			if dup[k] {
				return invalidField(field, "table %s: %s column %q appears twice", name, what, k)
			}
			dup[k] = true
		}
		return nil
	}
	if err := check("primary_key", "primary key", s.PrimaryKey); err != nil {
		return err
	}
	for i := range s.Columns {
		for _, k := range s.PrimaryKey {
			if s.Columns[i].Name == k {
				s.Columns[i].Type.Nullable = false
			}
		}
	}
	if err := check("partition_keys", "partition key", spec.PartitionKeys); err != nil {
		return err
	}
	if len(s.PrimaryKey) > 0 {
		for _, p := range spec.PartitionKeys {
			if !contains(s.PrimaryKey, p) {
				return invalidField("partition_keys", "table %s: partition key %q must be part of the primary key of a primary-key table", name, p)
			}
		}
	}
	if len(spec.BucketKeys) == 0 {
		for _, k := range s.PrimaryKey {
			if !contains(spec.PartitionKeys, k) {
				spec.BucketKeys = append(spec.BucketKeys, k)
			}
		}
	}
	if err := check("bucket_keys", "bucket key", spec.BucketKeys); err != nil {
		return err
	}
	if spec.BucketCount == 0 {
		spec.BucketCount = c.opts.DefaultBucketCount
	}
	if spec.BucketCount < 1 || spec.BucketCount > c.opts.MaxBucketNum {
		return invalidField("bucket_count", "table %s: bucket count %d is out of range: want 1 to %d (max.bucket.num)",
			name, spec.BucketCount, c.opts.MaxBucketNum)
	}
	explicit := spec.ReplicationFactor != 0
	if v, ok := spec.Properties[ReplicationFactorProperty]; ok && spec.ReplicationFactor == 0 {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return invalidField("properties", "table %s: property %s=%q is not a positive integer", name, ReplicationFactorProperty, v)
		}
		spec.ReplicationFactor, explicit = n, true
	}
	if spec.ReplicationFactor < 0 {
		return invalidField("replication_factor", "table %s: replication factor %d is out of range: want at least 1", name, spec.ReplicationFactor)
	}
	if spec.ReplicationFactor == 0 {
		spec.ReplicationFactor = c.opts.DefaultReplicationFactor
	}
	// A replication factor asked for explicitly must be placeable: at most
	// the registered tablet servers. With none registered (a catalog set
	// up before its tablet servers start) and for the default, it is
	// capped when buckets are placed.
	if explicit && servers > 0 && spec.ReplicationFactor > servers {
		return invalidField("replication_factor", "table %s: replication factor %d is out of range: want 1 to %d, the number of registered tablet servers",
			name, spec.ReplicationFactor, servers)
	}
	// The table keeps its replication factor, so that its partitions get
	// the same (the original stores it among the table's properties too).
	props := make(map[string]string, len(spec.Properties)+1)
	for k, v := range spec.Properties {
		props[k] = v
	}
	props[ReplicationFactorProperty] = strconv.Itoa(spec.ReplicationFactor)
	spec.Properties = props
	return nil
}

// TabletServerIDs returns the registered tablet servers' ids, sorted.
func (c *Catalog) TabletServerIDs(ctx context.Context) ([]int32, error) {
	names, _, err := c.r.Children(ctx, TabletServerIDsPath, core.ReadOptions{})
	if errors.Is(err, core.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ids := make([]int32, 0, len(names))
	for _, n := range names {
		id, err := strconv.ParseInt(n, 10, 32)
		if err != nil {
			continue // not a tablet server node
		}
		ids = append(ids, int32(id))
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

// AssignBuckets spreads buckets round-robin over servers with
// replicationFactor replicas each (capped at len(servers)), starting at an
// offset derived from seed so that tables do not all lead on one server.
func AssignBuckets(buckets int32, replicationFactor int, servers []int32, seed int64) map[int32][]int32 {
	out := make(map[int32][]int32, buckets)
	rf := replicationFactor
	if rf > len(servers) {
		rf = len(servers)
	}
	start := 0
	if len(servers) > 0 {
		start = int(seed % int64(len(servers)))
		if start < 0 {
			start += len(servers)
		}
	}
	for b := int32(0); b < buckets; b++ {
		replicas := make([]int32, 0, rf)
		for i := 0; i < rf; i++ {
			replicas = append(replicas, servers[(start+int(b)+i)%len(servers)])
		}
		out[b] = replicas
	}
	return out
}

// bucketOps creates the bucket containers and each bucket's LeaderAndIsr
// (leader: the first replica; ISR: all replicas).
func (c *Catalog) bucketOps(tableID, partitionID int64, buckets map[int32][]int32) []core.Op {
	ops := []core.Op{core.CreateOp(BucketsPath(tableID, partitionID), nil, core.Persistent)}
	for _, b := range sortedKeys(buckets) {
		replicas := buckets[b]
		leader := NoLeader
		if len(replicas) > 0 {
			leader = replicas[0]
		}
		isr := append([]int32{}, replicas...)
		lai := LeaderAndIsr{Leader: leader, LeaderEpoch: 0, ISR: isr, CoordinatorEpoch: int32(c.opts.Epoch),
			BucketEpoch: 0, StandbyReplicas: []int32{}}
		ops = append(ops,
			core.CreateOp(BucketPath(tableID, partitionID, b), nil, core.Persistent),
			core.CreateOp(LeaderAndIsrPath(tableID, partitionID, b), lai.Marshal(), core.Persistent))
	}
	return ops
}

// CreateTable creates db.table in one fenced transaction: the table
// registration (table id from /metadata/table_seqid through the block
// allocator), its first schema, and, for a table without partition keys,
// the bucket assignment across the registered tablet servers, the bucket
// nodes and a LeaderAndIsr (v2, coordinator_epoch = Options.Epoch) for every
// bucket. A partitioned table gets its buckets per partition
// (CreatePartition). Errors: ErrInvalidArgument (naming the table and the
// column at fault), *NotFoundError (the database), *ExistsError (unless
// ignoreIfExists; then the existing table's info is returned), backend
// errors.
func (c *Catalog) CreateTable(ctx context.Context, db, table string, spec TableSpec, ignoreIfExists bool) (TableInfo, error) {
	if err := ValidateName(KindDatabase, db); err != nil {
		return TableInfo{}, err
	}
	if err := ValidateName(KindTable, table); err != nil {
		return TableInfo{}, err
	}
	name := db + "." + table
	servers, err := c.TabletServerIDs(ctx)
	if err != nil {
		return TableInfo{}, fmt.Errorf("create table %s: list tablet servers: %w", name, err)
	}
	if err := c.validateSpec(name, &spec, len(servers)); err != nil {
		return TableInfo{}, err
	}
	// A table that exists already costs no table id (the transaction
	// below still checks, for a create racing this one).
	if n, err := core.Get(ctx, c.r, TablePath(db, table)); err == nil && len(n.Data) > 0 {
		if !ignoreIfExists {
			return TableInfo{}, exists(KindTable, name)
		}
		info, err := c.GetTable(ctx, db, table)
		info.Existed = err == nil
		return info, err
	}
	tableID, err := c.tableIDs.Next(ctx, 1, c.opts.Fence)
	if err != nil {
		return TableInfo{}, fmt.Errorf("create table %s: allocate table id: %w", name, err)
	}
	now := c.nowMillis()
	reg := TableRegistration{TableID: tableID, Comment: spec.Comment, PartitionKeys: spec.PartitionKeys,
		BucketKeys: spec.BucketKeys, BucketCount: spec.BucketCount, Properties: nonNil(spec.Properties),
		CustomProperties: nonNil(spec.CustomProperties), RemoteDataDir: spec.RemoteDataDir,
		CreatedTime: now, ModifiedTime: now}
	ops := []core.Op{
		core.CheckOp(DatabasePath(db), core.AnyVersion),
		core.CreateOp(TablePath(db, table), reg.Marshal(), core.Persistent).WithParents(),
		core.CreateOp(SchemasPath(db, table), nil, core.Persistent),
		core.CreateOp(SchemaPath(db, table, firstSchemaID), spec.Schema.Marshal(), core.Persistent),
	}
	if !reg.Partitioned() {
		buckets := AssignBuckets(spec.BucketCount, spec.ReplicationFactor, servers, tableID)
		ops = append(ops, core.CreateOp(TableAssignmentPath(tableID), TableAssignment{Buckets: buckets}.Marshal(), core.Persistent).WithParents())
		ops = append(ops, c.bucketOps(tableID, -1, buckets)...)
	}
	setResult(ctx, func(r *RequestRecord) { r.TableID = tableID })
	res, err := c.txn(ctx, ops)
	switch {
	case opErr(err, 0, core.ErrNotFound):
		return TableInfo{}, notFound(KindDatabase, db)
	case opErr(err, 1, core.ErrNodeExists):
		if ignoreIfExists {
			info, err := c.GetTable(ctx, db, table)
			info.Existed = err == nil
			return info, err
		}
		return TableInfo{}, exists(KindTable, name)
	case errors.Is(err, core.ErrTooLarge):
		return TableInfo{}, tooLarge(err, KindTable, name, plural(int(spec.BucketCount), "bucket")+", "+plural(len(spec.Schema.Columns), "column"))
	case err != nil:
		return TableInfo{}, fmt.Errorf("create table %s: %w", name, err)
	}
	return TableInfo{Database: db, Table: table, Registration: reg, SchemaID: firstSchemaID, Schema: spec.Schema,
		Revision: res.Revision}, nil
}

// GetTable reads db.table's registration and current (highest) schema.
// Errors: *NotFoundError (a table node without data, still being created,
// does not exist yet), ErrBadRecord, backend errors.
func (c *Catalog) GetTable(ctx context.Context, db, table string) (TableInfo, error) {
	if ValidateName(KindDatabase, db) != nil || ValidateName(KindTable, table) != nil {
		return TableInfo{}, notFound(KindTable, db+"."+table)
	}
	tablePath := TablePath(db, table)
	schemasPath := core.JoinPath(tablePath, schemasSeg)
	res, err := c.readShared(ctx, []string{tablePath, core.JoinPath(schemasPath, strconv.Itoa(int(firstSchemaID)))})
	if err != nil {
		return TableInfo{}, err
	}
	if res[0].Err != nil || len(res[0].Node.Data) == 0 {
		if res[0].Err != nil && !errors.Is(res[0].Err, core.ErrNotFound) {
			return TableInfo{}, res[0].Err
		}
		return TableInfo{}, notFound(KindTable, db+"."+table)
	}
	reg, err := cached(&c.cache, res[0].Node, UnmarshalTableRegistration)
	if err != nil {
		return TableInfo{}, fmt.Errorf("table %s.%s: %w", db, table, err)
	}
	info := TableInfo{Database: db, Table: table, Registration: reg, Revision: res[0].Node.Stat.CreateRevision}
	schemaNode := res[1]
	// The current schema is the highest child of schemas/.
	ids, _, err := c.r.Children(ctx, schemasPath, core.ReadOptions{})
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return TableInfo{}, err
	}
	best := int32(-1)
	for _, s := range ids {
		if n, err := strconv.ParseInt(s, 10, 32); err == nil && int32(n) > best {
			best = int32(n)
		}
	}
	if best < 0 {
		return TableInfo{}, fmt.Errorf("%w: table %s.%s has no schema", ErrBadRecord, db, table)
	}
	if best != firstSchemaID {
		schemaNode.Node, schemaNode.Err = core.Get(ctx, c.r, SchemaPath(db, table, best))
	}
	if schemaNode.Err != nil {
		return TableInfo{}, fmt.Errorf("table %s.%s schema %d: %w", db, table, best, schemaNode.Err)
	}
	schema, err := cached(&c.cache, schemaNode.Node, UnmarshalSchema)
	if err != nil {
		return TableInfo{}, fmt.Errorf("table %s.%s schema %d: %w", db, table, best, err)
	}
	info.SchemaID, info.Schema = best, schema
	return info, nil
}

// ListTables returns db's tables' names, sorted (tables still being
// created are left out). Errors: *NotFoundError (the database), backend
// errors.
func (c *Catalog) ListTables(ctx context.Context, db string) ([]string, error) {
	names, _, err := c.r.Children(ctx, TablesPath(db), core.ReadOptions{})
	if errors.Is(err, core.ErrNotFound) || errors.Is(err, core.ErrInvalidPath) {
		if _, ok, err := core.Exists(ctx, c.r, DatabasePath(db)); err == nil && ok {
			return []string{}, nil
		}
		return nil, notFound(KindDatabase, db)
	}
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = TablePath(db, n)
	}
	res, err := c.r.GetMany(ctx, paths, core.ReadOptions{NoData: true})
	if err != nil {
		return nil, err
	}
	out := names[:0]
	for i, r := range res {
		if r.Err == nil && r.Node.Stat.DataLength > 0 {
			out = append(out, names[i])
		}
	}
	return out, nil
}

// DropTable deletes db.table in one fenced transaction: its registration,
// schemas and partitions, and its (and its partitions') assignments,
// buckets and LeaderAndIsr records. Errors: *NotFoundError unless
// ignoreIfNotExists, backend errors.
func (c *Catalog) DropTable(ctx context.Context, db, table string, ignoreIfNotExists bool) (int64, error) {
	name := db + "." + table
	if ValidateName(KindDatabase, db) != nil || ValidateName(KindTable, table) != nil {
		if ignoreIfNotExists {
			return 0, nil
		}
		return 0, notFound(KindTable, name)
	}
	for attempt := 0; ; attempt++ {
		snap, err := c.b.Snapshot(ctx, TablePath(db, table))
		if err != nil {
			return 0, fmt.Errorf("drop table %s: %w", name, err)
		}
		if len(snap.Nodes) == 0 {
			if ignoreIfNotExists {
				return 0, nil
			}
			return 0, notFound(KindTable, name)
		}
		ops, err := c.assignmentDeletes(ctx, snap.Nodes, db, table)
		if err != nil {
			return 0, fmt.Errorf("drop table %s: %w", name, err)
		}
		ops = append(ops, deletesOf(snap.Nodes)...)
		// The table node itself must still be the one we read.
		for i := range ops {
			if ops[i].Path == snap.Nodes[0].Path {
				ops[i].Version = snap.Nodes[0].Stat.Version
			}
		}
		res, err := c.txn(ctx, ops)
		if err != nil && retryableDrop(err) && attempt < c.maxRetries {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("drop table %s: %w", name, err)
		}
		return res.Revision, nil
	}
}

// assignmentDeletes returns the deletes of table's assignment subtree and
// of its partitions' assignment subtrees, found from the registrations in
// nodes (a snapshot covering the table).
func (c *Catalog) assignmentDeletes(ctx context.Context, nodes []core.Node, db, table string) ([]core.Op, error) {
	var ops []core.Op
	tp := TablePath(db, table)
	pp := PartitionsPath(db, table) + "/"
	for _, n := range nodes {
		var sub string
		switch {
		case n.Path == tp && len(n.Data) > 0:
			reg, err := UnmarshalTableRegistration(n.Data)
			if err != nil {
				return nil, fmt.Errorf("table %s.%s: %w", db, table, err)
			}
			sub = TableAssignmentPath(reg.TableID)
		case strings.HasPrefix(n.Path, pp) && !strings.Contains(n.Path[len(pp):], "/") && len(n.Data) > 0:
			reg, err := UnmarshalPartitionRegistration(n.Data)
			if err != nil {
				return nil, fmt.Errorf("partition %s: %w", n.Path, err)
			}
			sub = PartitionAssignmentPath(reg.PartitionID)
		default:
			continue
		}
		snap, err := c.b.Snapshot(ctx, sub)
		if err != nil {
			return nil, err
		}
		ops = append(ops, deletesOf(snap.Nodes)...)
	}
	return ops, nil
}

// deletesOf deletes nodes children first.
func deletesOf(nodes []core.Node) []core.Op {
	paths := make([]string, len(nodes))
	for i, n := range nodes {
		paths[i] = n.Path
	}
	sort.Sort(sort.Reverse(sort.StringSlice(paths)))
	ops := make([]core.Op, len(paths))
	for i, p := range paths {
		ops[i] = core.DeleteOp(p, core.AnyVersion)
	}
	return ops
}

// retryableDrop: the subtree changed between the snapshot and the delete.
func retryableDrop(err error) bool {
	return core.FailedOpIndex(err) >= 0 &&
		(errors.Is(err, core.ErrNotEmpty) || errors.Is(err, core.ErrNotFound) || errors.Is(err, core.ErrBadVersion))
}

// --------------------------------------------------------------- partitions

// PartitionInfo is a partition as the catalog holds it.
type PartitionInfo struct {
	Name         string
	Registration PartitionRegistration
}

// CreatePartition creates partition of the partitioned table db.table in
// one fenced transaction: its registration (partition id from
// /metadata/partition_seqid), its assignment, bucket nodes and LeaderAndIsr
// records. It returns the partition's id. Errors: ErrInvalidArgument (bad
// name, table not partitioned), *NotFoundError (the table), *ExistsError
// unless ignoreIfExists, backend errors.
func (c *Catalog) CreatePartition(ctx context.Context, db, table, partition string, ignoreIfExists bool) (PartitionInfo, int64, error) {
	name := db + "." + table
	if err := ValidatePartitionName(partition); err != nil {
		return PartitionInfo{}, 0, err
	}
	node, err := core.Get(ctx, c.r, TablePath(db, table))
	if errors.Is(err, core.ErrNotFound) || errors.Is(err, core.ErrInvalidPath) || (err == nil && len(node.Data) == 0) {
		return PartitionInfo{}, 0, notFound(KindTable, name)
	}
	if err != nil {
		return PartitionInfo{}, 0, err
	}
	treg, err := UnmarshalTableRegistration(node.Data)
	if err != nil {
		return PartitionInfo{}, 0, fmt.Errorf("table %s: %w", name, err)
	}
	if !treg.Partitioned() {
		return PartitionInfo{}, 0, invalidField("partition", "table %s is not partitioned: it has no partition keys", name)
	}
	parts, _, err := c.r.Children(ctx, PartitionsPath(db, table), core.ReadOptions{})
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return PartitionInfo{}, 0, err
	}
	if len(parts) >= c.opts.MaxPartitionNum && !contains(parts, partition) {
		return PartitionInfo{}, 0, invalidField("partition", "table %s has %d partitions: at most %d are allowed (max.partition.num)",
			name, len(parts), c.opts.MaxPartitionNum)
	}
	servers, err := c.TabletServerIDs(ctx)
	if err != nil {
		return PartitionInfo{}, 0, err
	}
	pid, err := c.partIDs.Next(ctx, 1, c.opts.Fence)
	if err != nil {
		return PartitionInfo{}, 0, fmt.Errorf("create partition %s/%s: allocate partition id: %w", name, partition, err)
	}
	preg := PartitionRegistration{TableID: treg.TableID, PartitionID: pid, RemoteDataDir: treg.RemoteDataDir}
	rf := c.opts.DefaultReplicationFactor
	if n, err := strconv.Atoi(treg.Properties[ReplicationFactorProperty]); err == nil && n > 0 {
		rf = n
	}
	buckets := AssignBuckets(treg.BucketCount, rf, servers, pid)
	ops := []core.Op{
		core.CheckOp(TablePath(db, table), node.Stat.Version),
		core.CreateOp(PartitionPath(db, table, partition), preg.Marshal(), core.Persistent).WithParents(),
		core.CreateOp(PartitionAssignmentPath(pid), PartitionAssignment{TableID: treg.TableID, Buckets: buckets}.Marshal(), core.Persistent).WithParents(),
	}
	ops = append(ops, c.bucketOps(treg.TableID, pid, buckets)...)
	setResult(ctx, func(r *RequestRecord) { r.TableID, r.PartitionID = treg.TableID, pid })
	res, err := c.txn(ctx, ops)
	switch {
	case opErr(err, 0, core.ErrNotFound) || opErr(err, 0, core.ErrBadVersion):
		return PartitionInfo{}, 0, notFound(KindTable, name)
	case opErr(err, 1, core.ErrNodeExists):
		if ignoreIfExists {
			n, err := core.Get(ctx, c.b, PartitionPath(db, table, partition))
			if err != nil {
				return PartitionInfo{}, 0, err
			}
			reg, err := UnmarshalPartitionRegistration(n.Data)
			return PartitionInfo{Name: partition, Registration: reg}, 0, err
		}
		return PartitionInfo{}, 0, exists(KindPartition, name+"/"+partition)
	case errors.Is(err, core.ErrTooLarge):
		return PartitionInfo{}, 0, tooLarge(err, KindPartition, name+"/"+partition, plural(int(treg.BucketCount), "bucket"))
	case err != nil:
		return PartitionInfo{}, 0, fmt.Errorf("create partition %s/%s: %w", name, partition, err)
	}
	return PartitionInfo{Name: partition, Registration: preg}, res.Revision, nil
}

// DropPartition deletes a partition with its assignment, buckets and
// LeaderAndIsr records in one fenced transaction. Errors: *NotFoundError
// unless ignoreIfNotExists, backend errors.
func (c *Catalog) DropPartition(ctx context.Context, db, table, partition string, ignoreIfNotExists bool) (int64, error) {
	full := db + "." + table + "/" + partition
	if ValidatePartitionName(partition) != nil || ValidateName(KindTable, table) != nil || ValidateName(KindDatabase, db) != nil {
		if ignoreIfNotExists {
			return 0, nil
		}
		return 0, notFound(KindPartition, full)
	}
	for attempt := 0; ; attempt++ {
		n, err := core.Get(ctx, c.b, PartitionPath(db, table, partition))
		if errors.Is(err, core.ErrNotFound) {
			if ignoreIfNotExists {
				return 0, nil
			}
			return 0, notFound(KindPartition, full)
		}
		if err != nil {
			return 0, err
		}
		reg, err := UnmarshalPartitionRegistration(n.Data)
		if err != nil {
			return 0, fmt.Errorf("partition %s: %w", full, err)
		}
		snap, err := c.b.Snapshot(ctx, PartitionAssignmentPath(reg.PartitionID))
		if err != nil {
			return 0, err
		}
		ops := deletesOf(snap.Nodes)
		ops = append(ops, core.DeleteOp(n.Path, n.Stat.Version))
		res, err := c.txn(ctx, ops)
		if err != nil && retryableDrop(err) && attempt < c.maxRetries {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("drop partition %s: %w", full, err)
		}
		return res.Revision, nil
	}
}

// ListPartitions returns db.table's partitions, sorted by name. Errors:
// *NotFoundError (the table), backend errors.
func (c *Catalog) ListPartitions(ctx context.Context, db, table string) ([]PartitionInfo, error) {
	name := db + "." + table
	names, _, err := c.r.Children(ctx, PartitionsPath(db, table), core.ReadOptions{})
	if errors.Is(err, core.ErrNotFound) || errors.Is(err, core.ErrInvalidPath) {
		n, err := core.Get(ctx, c.r, TablePath(db, table))
		if err == nil && len(n.Data) > 0 {
			return []PartitionInfo{}, nil
		}
		return nil, notFound(KindTable, name)
	}
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(names))
	for i, p := range names {
		paths[i] = PartitionPath(db, table, p)
	}
	res, err := c.r.GetMany(ctx, paths, core.ReadOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]PartitionInfo, 0, len(names))
	for i, r := range res {
		if r.Err != nil || len(r.Node.Data) == 0 {
			continue
		}
		reg, err := cached(&c.cache, r.Node, UnmarshalPartitionRegistration)
		if err != nil {
			return nil, fmt.Errorf("partition %s/%s: %w", name, names[i], err)
		}
		out = append(out, PartitionInfo{Name: names[i], Registration: reg})
	}
	return out, nil
}

// ------------------------------------------------------------- assignments

// BucketInfo is one bucket's replicas and leadership.
type BucketInfo struct {
	Bucket       int32
	Replicas     []int32
	LeaderAndIsr LeaderAndIsr
}

// Buckets returns the buckets of a table (partitionID < 0) or partition,
// in bucket order. Errors: ErrNotFound (no assignment), ErrBadRecord,
// backend errors.
func (c *Catalog) Buckets(ctx context.Context, tableID, partitionID int64) ([]BucketInfo, error) {
	path := TableAssignmentPath(tableID)
	if partitionID >= 0 {
		path = PartitionAssignmentPath(partitionID)
	}
	n, err := core.Get(ctx, c.r, path)
	if err != nil {
		return nil, err
	}
	var buckets map[int32][]int32
	if partitionID >= 0 {
		a, err := UnmarshalPartitionAssignment(n.Data)
		if err != nil {
			return nil, err
		}
		buckets = a.Buckets
	} else {
		a, err := UnmarshalTableAssignment(n.Data)
		if err != nil {
			return nil, err
		}
		buckets = a.Buckets
	}
	ids := sortedKeys(buckets)
	paths := make([]string, len(ids))
	for i, b := range ids {
		paths[i] = LeaderAndIsrPath(tableID, partitionID, b)
	}
	res, err := c.r.GetMany(ctx, paths, core.ReadOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]BucketInfo, len(ids))
	for i, b := range ids {
		out[i] = BucketInfo{Bucket: b, Replicas: buckets[b], LeaderAndIsr: LeaderAndIsr{Leader: NoLeader, ISR: []int32{}, StandbyReplicas: []int32{}}}
		if res[i].Err == nil {
			if l, err := UnmarshalLeaderAndIsr(res[i].Node.Data); err == nil {
				out[i].LeaderAndIsr = l
			}
		}
	}
	return out, nil
}

// ----------------------------------------------------------- tablet servers

// TabletServerInfo is a registered tablet server.
type TabletServerInfo struct {
	ID           int32
	Registration TabletServerRegistration
	// Owner is the session or lease owning the ephemeral registration.
	Owner int64
}

// ListTabletServers returns the registered tablet servers, by id.
func (c *Catalog) ListTabletServers(ctx context.Context) ([]TabletServerInfo, error) {
	ids, err := c.TabletServerIDs(ctx)
	if err != nil || len(ids) == 0 {
		return []TabletServerInfo{}, err
	}
	paths := make([]string, len(ids))
	for i, id := range ids {
		paths[i] = TabletServerPath(id)
	}
	res, err := c.r.GetMany(ctx, paths, core.ReadOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]TabletServerInfo, 0, len(ids))
	for i, r := range res {
		if r.Err != nil {
			continue
		}
		reg, err := UnmarshalTabletServerRegistration(r.Node.Data)
		if err != nil {
			reg = TabletServerRegistration{}
		}
		out = append(out, TabletServerInfo{ID: ids[i], Registration: reg, Owner: r.Node.Stat.EphemeralOwner})
	}
	return out, nil
}

// ---------------------------------------------------------------- ids

// Counters the admin API allocates from, by name.
var Counters = map[string]string{
	"table":     TableSeqIDPath,
	"partition": PartitionSeqIDPath,
	"writer":    WriterIDPath,
}

// AllocateIDs reserves n contiguous ids [first, first+n) from the named
// counter ("table", "partition" or "writer"), out of the leadership's
// blocks. Errors: ErrInvalidArgument (unknown counter, n outside 1 to
// MaxAllocateIDs), *CounterExhaustedError (ErrTooLarge: the counter
// would pass the largest int64; nothing was reserved), backend errors.
func (c *Catalog) AllocateIDs(ctx context.Context, counter string, n int64) (int64, error) {
	var a *core.BlockAllocator
	switch counter {
	case "table":
		a = c.tableIDs
	case "partition":
		a = c.partIDs
	case "writer":
		a = c.writerIDs
	default:
		return 0, invalidField("counter", "unknown id counter %q (want table, partition or writer)", counter)
	}
	if n < 1 || n > MaxAllocateIDs {
		return 0, invalidField("count", "allocate %d ids from %s: count is out of range: want 1 to %d", n, counter, MaxAllocateIDs)
	}
	first, err := a.Next(ctx, n, c.opts.Fence)
	if errors.Is(err, core.ErrTooLarge) {
		return 0, &CounterExhaustedError{Counter: counter, N: n}
	}
	if err != nil {
		return 0, err
	}
	// With a request id, the range is handed out only once its record is
	// committed; a range whose record could not be written is left unused,
	// like the rest of a leadership's block at failover.
	setResult(ctx, func(r *RequestRecord) { r.First, r.Count = first, n })
	if _, err := c.txn(ctx, nil); err != nil {
		return 0, fmt.Errorf("allocate %d ids from %s: record the request: %w", n, counter, err)
	}
	return first, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
