package adminapi

import adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"

// Semantics is what repeating an RPC of the admin or tablet-server service
// does: the one table the client SDK (which calls it repeats), the
// coordinator (which calls it applies at most once per request id) and
// their tests read.
type Semantics int

const (
	// Write: a write repeated only when it is known not to have been
	// applied (its outcome is otherwise unknown to the caller).
	Write Semantics = iota
	// RetrySafe: a read, or a call whose repetition has the effect of one
	// (a registration replaces the earlier one of the same id; a heartbeat
	// renews the same lease; an AdjustIsr repeated is answered with the
	// record it made; a controlled shutdown repeated moves what is left; a
	// deregistration repeated finds the lease gone; an election or a
	// reassignment repeated finds it done or started already).
	RetrySafe
	// ExactlyOnce: a write the coordinator applies at most once per request
	// id (RequestIDHeader): the client sends each with one id for all its
	// attempts and repeats it after an ambiguous failure.
	ExactlyOnce
)

func (s Semantics) String() string {
	switch s {
	case RetrySafe:
		return "retry-safe"
	case ExactlyOnce:
		return "exactly-once"
	}
	return "write"
}

// RequestIDHeader is the gRPC metadata key carrying a write's request id.
// A coordinator commits the id with the write's effect and answers a
// repetition of the same id (same method and body) from that record,
// without applying it again; the same id with another body is refused with
// INVALID_ARGUMENT.
const RequestIDHeader = "metaplane-request-id"

// methods declares every RPC that is not a plain Write.
var methods = map[string]Semantics{
	adminv1.AdminService_ListDatabases_FullMethodName:                 RetrySafe,
	adminv1.AdminService_GetDatabase_FullMethodName:                   RetrySafe,
	adminv1.AdminService_GetTableInfo_FullMethodName:                  RetrySafe,
	adminv1.AdminService_ListTables_FullMethodName:                    RetrySafe,
	adminv1.AdminService_ListPartitions_FullMethodName:                RetrySafe,
	adminv1.AdminService_ListTabletServers_FullMethodName:             RetrySafe,
	adminv1.AdminService_ListACLs_FullMethodName:                      RetrySafe,
	adminv1.AdminService_DescribeConfigs_FullMethodName:               RetrySafe,
	adminv1.AdminService_GetServerTags_FullMethodName:                 RetrySafe,
	adminv1.AdminService_GetLeader_FullMethodName:                     RetrySafe,
	adminv1.AdminService_GetCoordinatorRaftStatus_FullMethodName:      RetrySafe,
	adminv1.AdminService_ListBuckets_FullMethodName:                   RetrySafe,
	adminv1.AdminService_ElectLeaders_FullMethodName:                  RetrySafe,
	adminv1.AdminService_ReassignBuckets_FullMethodName:               RetrySafe,
	adminv1.TabletServerService_RegisterTabletServer_FullMethodName:   RetrySafe,
	adminv1.TabletServerService_TabletServerHeartbeat_FullMethodName:  RetrySafe,
	adminv1.TabletServerService_FetchMetadata_FullMethodName:          RetrySafe,
	adminv1.TabletServerService_FetchMetadataSnapshot_FullMethodName:  RetrySafe,
	adminv1.TabletServerService_AdjustIsr_FullMethodName:              RetrySafe,
	adminv1.TabletServerService_ControlledShutdown_FullMethodName:     RetrySafe,
	adminv1.TabletServerService_DeregisterTabletServer_FullMethodName: RetrySafe,

	adminv1.AdminService_CreateDatabase_FullMethodName:  ExactlyOnce,
	adminv1.AdminService_DropDatabase_FullMethodName:    ExactlyOnce,
	adminv1.AdminService_CreateTable_FullMethodName:     ExactlyOnce,
	adminv1.AdminService_DropTable_FullMethodName:       ExactlyOnce,
	adminv1.AdminService_CreatePartition_FullMethodName: ExactlyOnce,
	adminv1.AdminService_DropPartition_FullMethodName:   ExactlyOnce,
	adminv1.AdminService_AllocateIDs_FullMethodName:     ExactlyOnce,
	adminv1.AdminService_AddACLs_FullMethodName:         ExactlyOnce,
	adminv1.AdminService_RemoveACLs_FullMethodName:      ExactlyOnce,
	adminv1.AdminService_AlterConfigs_FullMethodName:    ExactlyOnce,
	adminv1.AdminService_SetServerTags_FullMethodName:   ExactlyOnce,
}

// SemanticsOf is the semantics of the RPC with the full method name
// ("/metaplane.admin.v1.AdminService/CreateTable"); Write for any method
// the table does not name.
func SemanticsOf(fullMethod string) Semantics { return methods[fullMethod] }
