package coordinator

import (
	"context"
	"fmt"
	"strings"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/authn"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// The ACL operations and permissions (catalog.ACLOperations).
const (
	OpAll      = "ALL"
	OpRead     = "READ"
	OpWrite    = "WRITE"
	OpCreate   = "CREATE"
	OpDrop     = "DROP"
	OpAlter    = "ALTER"
	OpDescribe = "DESCRIBE"

	permAllow = "ALLOW"
	permDeny  = "DENY"
)

// The ACL resource types (catalog.ACLResourceTypes).
const (
	ResourceCluster  = "CLUSTER"
	ResourceDatabase = "DATABASE"
	ResourceTable    = "TABLE"
)

// ClusterResource is the cluster's resource as the original names it. An
// ACL on a CLUSTER resource of any name applies to the one cluster.
var ClusterResource = catalog.ResourceKey{Type: ResourceCluster, Name: "fluss-cluster"}

// access is what a method needs: the operation on a resource, checked
// before the handler runs, and for a list answer a filter that drops what
// the principal may not DESCRIBE.
type access struct {
	// op is the operation checked before the call; "" checks nothing
	// before it (a filtered list).
	op string
	// resource names the resource of a request; nil: the cluster.
	resource func(req any) catalog.ResourceKey
	// filter, when set, removes from the answer the entries the principal
	// may not DESCRIBE (decide answers for one resource).
	filter func(decide func(op string, r catalog.ResourceKey) (bool, error), req, resp any) error
	// doc says, for docs/security.md, what the method is checked for.
	doc string
}

// databaseOf and tableOf read the resource of a request from its getters.
func databaseOf(field func(any) string) func(any) catalog.ResourceKey {
	return func(req any) catalog.ResourceKey {
		return catalog.ResourceKey{Type: ResourceDatabase, Name: field(req)}
	}
}

func tableOf(req any) catalog.ResourceKey {
	t, _ := req.(interface {
		GetDatabase() string
		GetTable() string
	})
	if t == nil {
		return catalog.ResourceKey{Type: ResourceTable}
	}
	return catalog.ResourceKey{Type: ResourceTable, Name: t.GetDatabase() + "." + t.GetTable()}
}

func nameField(req any) string {
	if r, ok := req.(interface{ GetName() string }); ok {
		return r.GetName()
	}
	return ""
}

func databaseField(req any) string {
	if r, ok := req.(interface{ GetDatabase() string }); ok {
		return r.GetDatabase()
	}
	return ""
}

func onCluster(op string) access { return access{op: op} }

// methodAccess maps every method of AdminService and TabletServerService
// to what it needs (the authorization table of docs/security.md). A
// method without a row is refused whenever security is on, and a test
// walks the service descriptors so that a new method cannot lack one.
var methodAccess = map[string]access{
	adminv1.AdminService_CreateDatabase_FullMethodName:    onCluster(OpCreate),
	adminv1.AdminService_DropDatabase_FullMethodName:      {op: OpDrop, resource: databaseOf(nameField)},
	adminv1.AdminService_ListDatabases_FullMethodName:     {filter: filterDatabases, doc: "DESCRIBE on each DATABASE listed (the others are left out)"},
	adminv1.AdminService_GetDatabase_FullMethodName:       {op: OpDescribe, resource: databaseOf(nameField)},
	adminv1.AdminService_CreateTable_FullMethodName:       {op: OpCreate, resource: databaseOf(databaseField)},
	adminv1.AdminService_DropTable_FullMethodName:         {op: OpDrop, resource: tableOf},
	adminv1.AdminService_GetTableInfo_FullMethodName:      {op: OpDescribe, resource: tableOf},
	adminv1.AdminService_ListTables_FullMethodName:        {filter: filterTables, doc: "DESCRIBE on each TABLE listed (the others are left out)"},
	adminv1.AdminService_CreatePartition_FullMethodName:   {op: OpWrite, resource: tableOf},
	adminv1.AdminService_DropPartition_FullMethodName:     {op: OpWrite, resource: tableOf},
	adminv1.AdminService_ListPartitions_FullMethodName:    {op: OpDescribe, resource: tableOf},
	adminv1.AdminService_ListTabletServers_FullMethodName: onCluster(OpDescribe),
	adminv1.AdminService_AllocateIDs_FullMethodName:       onCluster(OpWrite),
	adminv1.AdminService_AddACLs_FullMethodName:           onCluster(OpAlter),
	adminv1.AdminService_RemoveACLs_FullMethodName:        onCluster(OpAlter),
	adminv1.AdminService_ListACLs_FullMethodName:          onCluster(OpDescribe),
	adminv1.AdminService_AlterConfigs_FullMethodName:      onCluster(OpAlter),
	adminv1.AdminService_DescribeConfigs_FullMethodName:   onCluster(OpDescribe),
	adminv1.AdminService_SetServerTags_FullMethodName:     onCluster(OpAlter),
	adminv1.AdminService_GetServerTags_FullMethodName:     onCluster(OpDescribe),
	adminv1.AdminService_ListBuckets_FullMethodName:       {op: OpDescribe, resource: tableOf},
	adminv1.AdminService_ElectLeaders_FullMethodName:      onCluster(OpAlter),
	adminv1.AdminService_ReassignBuckets_FullMethodName:   onCluster(OpAlter),
	adminv1.AdminService_GetLeader_FullMethodName:         onCluster(OpDescribe),

	adminv1.AdminService_GetCoordinatorRaftStatus_FullMethodName: onCluster(OpDescribe),
	adminv1.AdminService_TransferRaftLeadership_FullMethodName:   onCluster(OpAlter),
	adminv1.AdminService_AddRaftVoter_FullMethodName:             onCluster(OpAlter),
	adminv1.AdminService_RemoveRaftVoter_FullMethodName:          onCluster(OpAlter),
	// A backup is the whole tree, ACLs included: what READ of the cluster
	// already gives the metadata stream.
	adminv1.AdminService_SaveRaftSnapshot_FullMethodName: onCluster(OpRead),

	adminv1.TabletServerService_RegisterTabletServer_FullMethodName:        onCluster(OpWrite),
	adminv1.TabletServerService_TabletServerHeartbeat_FullMethodName:       onCluster(OpWrite),
	adminv1.TabletServerService_FetchMetadata_FullMethodName:               onCluster(OpRead),
	adminv1.TabletServerService_AdjustIsr_FullMethodName:                   onCluster(OpWrite),
	adminv1.TabletServerService_ControlledShutdown_FullMethodName:          onCluster(OpWrite),
	adminv1.TabletServerService_DeregisterTabletServer_FullMethodName:      onCluster(OpWrite),
	adminv1.TabletServerService_FetchMetadataStream_FullMethodName:         onCluster(OpRead),
	adminv1.TabletServerService_FetchMetadataSnapshot_FullMethodName:       onCluster(OpRead),
	adminv1.TabletServerService_FetchMetadataSnapshotStream_FullMethodName: onCluster(OpRead),
}

func filterDatabases(decide func(string, catalog.ResourceKey) (bool, error), _, resp any) error {
	r, ok := resp.(*adminv1.ListDatabasesResponse)
	if !ok {
		return nil
	}
	var err error
	r.Names, err = describable(decide, r.Names, func(n string) catalog.ResourceKey {
		return catalog.ResourceKey{Type: ResourceDatabase, Name: n}
	})
	return err
}

func filterTables(decide func(string, catalog.ResourceKey) (bool, error), req, resp any) error {
	r, ok := resp.(*adminv1.ListTablesResponse)
	if !ok {
		return nil
	}
	db := databaseField(req)
	var err error
	r.Names, err = describable(decide, r.Names, func(n string) catalog.ResourceKey {
		return catalog.ResourceKey{Type: ResourceTable, Name: db + "." + n}
	})
	return err
}

// describable keeps, in place, the names whose resource the principal may
// DESCRIBE.
func describable(decide func(string, catalog.ResourceKey) (bool, error), names []string, key func(string) catalog.ResourceKey) ([]string, error) {
	kept := names[:0]
	for _, n := range names {
		ok, err := decide(OpDescribe, key(n))
		if err != nil {
			return names, err
		}
		if ok {
			kept = append(kept, n)
		}
	}
	return kept, nil
}

// checkAccess finds the method's row and, with the authorizer on, checks
// that p may do its operation on its resource. Errors:
// ErrPermissionDenied naming the operation and the resource; backend
// errors reading the ACLs.
func (s *Server) checkAccess(ctx context.Context, sec *Security, p config.Principal, host, method string, req any) (access, error) {
	a, ok := methodAccess[method]
	if !ok {
		return access{}, fmt.Errorf("%w: %s has no row in the coordinator's authorization table; refused while security is on", adminapi.ErrPermissionDenied, method)
	}
	if !sec.Authorize || a.op == "" || sec.isSuperUser(p) {
		return a, nil
	}
	res := ClusterResource
	if a.resource != nil && req != nil {
		res = a.resource(req)
	}
	allowed, why, err := s.allowed(ctx, p, host, a.op, res)
	if err != nil {
		return a, err
	}
	if !allowed {
		return a, fmt.Errorf("%w: %s may not %s on %s %s (%s; authorizer.enabled, docs/security.md)",
			adminapi.ErrPermissionDenied, p, a.op, res.Type, res.Name, why)
	}
	return a, nil
}

func (sec *Security) isSuperUser(p config.Principal) bool { return authn.Contains(sec.SuperUsers, p) }

// decider returns the check filters use: whether p may do op on r.
func (s *Server) decider(ctx context.Context, p config.Principal, host string) func(string, catalog.ResourceKey) (bool, error) {
	return func(op string, r catalog.ResourceKey) (bool, error) {
		ok, _, err := s.allowed(ctx, p, host, op, r)
		return ok, err
	}
}

// aclCatalog is where the ACLs are read: the leader's catalog (its
// image), or on a standby its backend client.
func (s *Server) aclCatalog() (*catalog.Catalog, error) {
	if l := s.leader.Load(); l != nil && !l.lost() {
		return l.cat, nil
	}
	if ref := s.backend.Load(); ref != nil {
		return catalog.New(ref.b, catalog.Options{}), nil
	}
	return nil, fmt.Errorf("%w: no backend client to read the ACLs with", core.ErrUnavailable)
}

// resourceChain lists the resources whose ACLs apply to r, most specific
// first: r, the wildcard of its type, then its parents (a table's
// database, then the cluster) and their wildcards. The cluster's own ACLs
// are read apart (every CLUSTER name applies).
func resourceChain(r catalog.ResourceKey) []catalog.ResourceKey {
	var out []catalog.ResourceKey
	add := func(typ, name string) {
		out = append(out, catalog.ResourceKey{Type: typ, Name: name})
		if name != catalog.WildcardResource {
			out = append(out, catalog.ResourceKey{Type: typ, Name: catalog.WildcardResource})
		}
	}
	switch r.Type {
	case ResourceTable:
		add(ResourceTable, r.Name)
		if db, _, ok := strings.Cut(r.Name, "."); ok {
			add(ResourceDatabase, db)
		}
	case ResourceDatabase:
		add(ResourceDatabase, r.Name)
	}
	return out
}

// allowed decides whether p, calling from host, may do op on r, by the
// ACLs on r and on every resource above it (resourceChain and the
// cluster): a DENY entry that matches wins; else an ALLOW entry that
// matches allows; else it is denied. An entry matches when its principal
// is p (or User:*), its host is host (or * or empty) and its operation is
// op or ALL; an ALLOW of READ, WRITE, CREATE, DROP or ALTER also allows
// DESCRIBE. why says, when denied, which of the two it was.
func (s *Server) allowed(ctx context.Context, p config.Principal, host, op string, r catalog.ResourceKey) (ok bool, why string, err error) {
	cat, err := s.aclCatalog()
	if err != nil {
		return false, "", err
	}
	// A name that cannot be a stored resource (empty, "a/b") has no ACLs
	// of its own; its wildcard and parents still apply.
	var chain []catalog.ResourceKey
	for _, k := range resourceChain(r) {
		if k.Name != "" && !strings.Contains(k.Name, "/") && core.ValidatePath(catalog.ResourceACLPath(k.Type, k.Name)) == nil {
			chain = append(chain, k)
		}
	}
	lists, err := cat.ACLsOf(ctx, chain)
	if err != nil {
		return false, "", err
	}
	cluster, err := cat.ListACLs(ctx, ResourceCluster)
	if err != nil {
		return false, "", err
	}
	for _, c := range cluster {
		lists = append(lists, c.ACLs)
	}
	allow := false
	for _, l := range lists {
		for _, e := range l {
			if !entryMatches(e, p, host) {
				continue
			}
			switch strings.ToUpper(e.PermissionType) {
			case permDeny:
				if e.Operation == OpAll || e.Operation == op {
					return false, "denied by a DENY ACL", nil
				}
			case permAllow:
				if e.Operation == OpAll || e.Operation == op || (op == OpDescribe && impliesDescribe(e.Operation)) {
					allow = true
				}
			}
		}
	}
	if !allow {
		return false, "no ACL allows it", nil
	}
	return true, "", nil
}

func entryMatches(e catalog.ACLEntry, p config.Principal, host string) bool {
	if !strings.EqualFold(e.PrincipalType, p.Type) || (e.PrincipalName != p.Name && e.PrincipalName != "*") {
		return false
	}
	return e.Host == "" || e.Host == "*" || e.Host == host
}

func impliesDescribe(op string) bool {
	switch op {
	case OpRead, OpWrite, OpCreate, OpDrop, OpAlter:
		return true
	}
	return false
}
