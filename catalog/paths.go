package catalog

import (
	"strconv"
	"strings"

	"github.com/metaplane/metaplane/core"
)

// Paths of the original layout (FLUSS_LAYOUT.md), relative to the backend's
// root (zookeeper.path.root on ZooKeeper).
const (
	CoordinatorsPath        = "/coordinators"
	CoordinatorElectionPath = "/coordinators/election"
	CoordinatorActivePath   = "/coordinators/active"
	CoordinatorEpochPath    = "/coordinators/epoch"
	CoordinatorIDsPath      = "/coordinators/ids"

	TabletServersRoot    = "/tabletservers"
	TabletServerIDsPath  = "/tabletservers/ids"
	TableAssignmentsPath = "/tabletservers/tables"
	PartitionAssignsPath = "/tabletservers/partitions"
	ServerTagsPath       = "/tabletservers/server_tags"
	MetadataRoot         = "/metadata"
	MetadataPath         = MetadataRoot // alias of MetadataRoot
	DatabasesPath        = "/metadata/databases"
	TableSeqIDPath       = "/metadata/table_seqid"
	PartitionSeqIDPath   = "/metadata/partition_seqid"
	WriterIDPath         = "/metadata/writer_id"
	ACLsPath             = "/fluss-acls"
	ACLChangesPath       = "/fluss-acl-changes"
	ACLChangePrefix      = "/fluss-acl-changes/acl_changes_"
	ConfigRoot           = "/config"
	ConfigGlobalPath     = "/config/server/global"
	ConfigChangesPath    = "/config/changes"
	ConfigChangePrefix   = "/config/changes/config_change_"
	// MigrationPath is the migration marker (package migrate): present
	// while a live migration holds the store, as its source or its target.
	// It is never copied between stores.
	MigrationPath = "/metaplane-migration"
	// MigrationFencePath is the migration fence: while it exists a
	// coordinator on the store refuses to lead (docs/migration.md).
	MigrationFencePath    = "/metaplane-migration/fence"
	bucketsSeg            = "buckets"
	leaderIsrSeg          = "leader_isr"
	snapshotsSeg          = "snapshots"
	lakeTableSeg          = "laketable"
	schemasSeg            = "schemas"
	partitionsSeg         = "partitions"
	tablesSeg             = "tables"
	firstSchemaID         = 1
	maxNameLength         = 200
	partitionNameMaxBytes = 200
)

// CatalogPrefixes are the subtrees the metadata image follows.
var CatalogPrefixes = []string{MetadataRoot, TabletServersRoot, ACLsPath, ConfigRoot}

// DatabasePath is /metadata/databases/<db>.
func DatabasePath(db string) string { return core.JoinPath(DatabasesPath, db) }

// TablesPath is /metadata/databases/<db>/tables.
func TablesPath(db string) string { return core.JoinPath(DatabasesPath, db, tablesSeg) }

// TablePath is /metadata/databases/<db>/tables/<table>.
func TablePath(db, table string) string { return core.JoinPath(DatabasesPath, db, tablesSeg, table) }

// SchemasPath is .../tables/<table>/schemas.
func SchemasPath(db, table string) string { return core.JoinPath(TablePath(db, table), schemasSeg) }

// SchemaPath is .../tables/<table>/schemas/<id>.
func SchemaPath(db, table string, id int32) string {
	return core.JoinPath(SchemasPath(db, table), strconv.Itoa(int(id)))
}

// PartitionsPath is .../tables/<table>/partitions.
func PartitionsPath(db, table string) string {
	return core.JoinPath(TablePath(db, table), partitionsSeg)
}

// PartitionPath is .../tables/<table>/partitions/<name>.
func PartitionPath(db, table, partition string) string {
	return core.JoinPath(PartitionsPath(db, table), partition)
}

// TabletServerPath is /tabletservers/ids/<id>.
func TabletServerPath(id int32) string {
	return core.JoinPath(TabletServerIDsPath, strconv.Itoa(int(id)))
}

// TableAssignmentPath is /tabletservers/tables/<tableId>.
func TableAssignmentPath(tableID int64) string {
	return core.JoinPath(TableAssignmentsPath, strconv.FormatInt(tableID, 10))
}

// PartitionAssignmentPath is /tabletservers/partitions/<partitionId>.
func PartitionAssignmentPath(partitionID int64) string {
	return core.JoinPath(PartitionAssignsPath, strconv.FormatInt(partitionID, 10))
}

// BucketsPath is <assignment>/buckets for a table (partitionID < 0) or a
// partition.
func BucketsPath(tableID, partitionID int64) string {
	if partitionID >= 0 {
		return core.JoinPath(PartitionAssignmentPath(partitionID), bucketsSeg)
	}
	return core.JoinPath(TableAssignmentPath(tableID), bucketsSeg)
}

// BucketPath is <assignment>/buckets/<bucket>.
func BucketPath(tableID, partitionID int64, bucket int32) string {
	return core.JoinPath(BucketsPath(tableID, partitionID), strconv.Itoa(int(bucket)))
}

// LeaderAndIsrPath is <assignment>/buckets/<bucket>/leader_isr.
func LeaderAndIsrPath(tableID, partitionID int64, bucket int32) string {
	return core.JoinPath(BucketPath(tableID, partitionID, bucket), leaderIsrSeg)
}

// BucketSnapshotsPath is <bucket>/snapshots.
func BucketSnapshotsPath(tableID, partitionID int64, bucket int32) string {
	return core.JoinPath(BucketPath(tableID, partitionID, bucket), snapshotsSeg)
}

// LakeTablePath is /tabletservers/tables/<tableId>/laketable.
func LakeTablePath(tableID int64) string {
	return core.JoinPath(TableAssignmentPath(tableID), lakeTableSeg)
}

// ResourceTypePath is /fluss-acls/<resourceType>.
func ResourceTypePath(resourceType string) string { return core.JoinPath(ACLsPath, resourceType) }

// ResourceACLPath is /fluss-acls/<resourceType>/<resourceName>.
func ResourceACLPath(resourceType, resourceName string) string {
	return core.JoinPath(ACLsPath, resourceType, resourceName)
}

// nameChar and partitionChar are the characters of a database or table
// name (letters, digits, '_' and '-') and of a partition name (also '$',
// '.' and '='). Checked byte by byte: names are validated on every
// catalog read, where a regular expression cost a fifth of the read.
func nameChar(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-'
}

func partitionChar(b byte) bool {
	return nameChar(b) || b == '$' || b == '.' || b == '='
}

// only says whether every byte of s satisfies ok.
func only(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

// ValidateName checks a database or table name: 1 to 200 characters of
// letters, digits, '_' and '-'. The error wraps core.ErrInvalidArgument and
// names the kind and the name.
func ValidateName(kind, name string) error {
	if name != "" && len(name) <= maxNameLength && only(name, nameChar) {
		return nil
	}
	field := strings.ReplaceAll(kind, " ", "_")
	if name == "" {
		return invalidField(field, "%s name is empty", kind)
	}
	if len(name) > maxNameLength {
		return invalidField(field, "%s name %q is longer than %d characters", kind, truncate(name), maxNameLength)
	}
	return invalidField(field, "%s name %q may contain only letters, digits, '_' and '-'", kind, truncate(name))
}

// truncate shortens a refused name for an error message: a name far over
// the limit is not echoed whole.
func truncate(s string) string {
	if len(s) <= 2*maxNameLength {
		return s
	}
	return s[:maxNameLength] + "..."
}

// ValidatePartitionName checks a partition name (values joined with '$' for
// several partition keys): letters, digits and _ - $ . =, not "." or "..".
func ValidatePartitionName(name string) error {
	if name == "" {
		return invalidField("partition", "partition name is empty")
	}
	if len(name) > partitionNameMaxBytes {
		return invalidField("partition", "partition name %q is longer than %d characters", truncate(name), partitionNameMaxBytes)
	}
	if name == "." || name == ".." || !only(name, partitionChar) {
		return invalidField("partition", "partition name %q may contain only letters, digits and _ - $ . = (and is not . or ..)", truncate(name))
	}
	return nil
}
