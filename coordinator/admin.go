package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// adminService implements adminv1.AdminServiceServer on the leader; on a
// standby every call but GetLeader answers NOT_LEADER.
type adminService struct {
	adminv1.UnimplementedAdminServiceServer
	s *Server
}

func (a *adminService) CreateDatabase(ctx context.Context, r *adminv1.CreateDatabaseRequest) (*adminv1.CreateDatabaseResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	return once(a, ctx, l, adminv1.AdminService_CreateDatabase_FullMethodName, r, func(ctx context.Context) (*adminv1.CreateDatabaseResponse, error) {
		rev, err := l.cat.CreateDatabase(ctx, r.Name, catalog.DatabaseRegistration{Comment: r.Comment, CustomProperties: r.CustomProperties}, r.IgnoreIfExists)
		if err != nil {
			return nil, withField(err, databaseFields)
		}
		return &adminv1.CreateDatabaseResponse{Created: rev != 0}, nil
	}, func(context.Context, catalog.RequestRecord) (*adminv1.CreateDatabaseResponse, error) {
		return &adminv1.CreateDatabaseResponse{Created: true}, nil
	})
}

func (a *adminService) DropDatabase(ctx context.Context, r *adminv1.DropDatabaseRequest) (*adminv1.DropDatabaseResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	return once(a, ctx, l, adminv1.AdminService_DropDatabase_FullMethodName, r, func(ctx context.Context) (*adminv1.DropDatabaseResponse, error) {
		rev, err := l.cat.DropDatabase(ctx, r.Name, r.IgnoreIfNotExists, r.Cascade)
		if err != nil {
			return nil, withField(err, databaseFields)
		}
		return &adminv1.DropDatabaseResponse{Dropped: rev != 0}, nil
	}, func(context.Context, catalog.RequestRecord) (*adminv1.DropDatabaseResponse, error) {
		return &adminv1.DropDatabaseResponse{Dropped: true}, nil
	})
}

func (a *adminService) ListDatabases(ctx context.Context, r *adminv1.ListDatabasesRequest) (*adminv1.ListDatabasesResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	names, err := l.cat.ListDatabases(ctx)
	if err != nil {
		return nil, err
	}
	page, next, err := pageOf(names, self, r.PageSize, r.PageToken, "databases")
	if err != nil {
		return nil, err
	}
	return &adminv1.ListDatabasesResponse{Names: page, NextPageToken: next}, nil
}

func (a *adminService) GetDatabase(ctx context.Context, r *adminv1.GetDatabaseRequest) (*adminv1.GetDatabaseResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	reg, err := l.cat.GetDatabase(ctx, r.Name)
	if err != nil {
		return nil, err
	}
	return &adminv1.GetDatabaseResponse{Name: r.Name, Comment: reg.Comment, CustomProperties: reg.CustomProperties,
		CreatedTime: reg.CreatedTime, ModifiedTime: reg.ModifiedTime}, nil
}

// SpecFromDescriptor converts the wire descriptor into a catalog spec.
// Errors wrap core.ErrInvalidArgument and name the column at fault.
func SpecFromDescriptor(d *adminv1.TableDescriptor) (catalog.TableSpec, error) {
	if d == nil {
		return catalog.TableSpec{}, &adminapi.FieldError{Field: "descriptor",
			Err: fmt.Errorf("%w: table descriptor is missing", core.ErrInvalidArgument)}
	}
	spec := catalog.TableSpec{
		PartitionKeys: d.PartitionKeys, BucketKeys: d.BucketKeys, BucketCount: d.BucketCount,
		Comment: d.Comment, Properties: d.Properties, CustomProperties: d.CustomProperties,
		ReplicationFactor: int(d.ReplicationFactor),
	}
	spec.Schema.PrimaryKey = d.PrimaryKey
	for _, c := range d.Columns {
		t, err := catalog.ParseDataType(c.Type)
		if err != nil {
			return catalog.TableSpec{}, &adminapi.FieldError{Field: "descriptor.columns", Err: fmt.Errorf("column %q: %w", c.Name, err)}
		}
		spec.Schema.Columns = append(spec.Schema.Columns, catalog.Column{Name: c.Name, Type: t, Comment: c.Comment})
	}
	return spec, nil
}

// TableInfoToProto converts a catalog table (and its buckets, when known)
// to the wire form.
func TableInfoToProto(t catalog.TableInfo, buckets []catalog.BucketInfo) *adminv1.TableInfo {
	reg := t.Registration
	d := &adminv1.TableDescriptor{
		PrimaryKey: t.Schema.PrimaryKey, PartitionKeys: reg.PartitionKeys, BucketKeys: reg.BucketKeys,
		BucketCount: reg.BucketCount, Comment: reg.Comment, Properties: reg.Properties, CustomProperties: reg.CustomProperties,
	}
	for _, c := range t.Schema.Columns {
		d.Columns = append(d.Columns, &adminv1.Column{Name: c.Name, Type: c.Type.String(), Comment: c.Comment, Id: c.ID})
	}
	out := &adminv1.TableInfo{
		Database: t.Database, Table: t.Table, TableId: reg.TableID, SchemaId: t.SchemaID, Descriptor_: d,
		CreatedTime: reg.CreatedTime, ModifiedTime: reg.ModifiedTime,
		RegistrationJson: reg.Marshal(), SchemaJson: t.Schema.Marshal(),
	}
	for _, b := range buckets {
		l := b.LeaderAndIsr
		out.Buckets = append(out.Buckets, &adminv1.Bucket{Bucket: b.Bucket, Replicas: b.Replicas, Leader: l.Leader,
			LeaderEpoch: l.LeaderEpoch, Isr: l.ISR, CoordinatorEpoch: l.CoordinatorEpoch, BucketEpoch: l.BucketEpoch})
	}
	return out
}

func (a *adminService) CreateTable(ctx context.Context, r *adminv1.CreateTableRequest) (*adminv1.CreateTableResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	spec, err := SpecFromDescriptor(r.Descriptor_)
	if err != nil {
		return nil, adminapi.ToStatus(fmt.Errorf("create table %s.%s: %w", r.Database, r.Table, err))
	}
	return once(a, ctx, l, adminv1.AdminService_CreateTable_FullMethodName, r, func(ctx context.Context) (*adminv1.CreateTableResponse, error) {
		info, err := l.cat.CreateTable(ctx, r.Database, r.Table, spec, r.IgnoreIfExists)
		if err != nil {
			return nil, withField(err, tableFields)
		}
		var buckets []catalog.BucketInfo
		if !info.Registration.Partitioned() {
			buckets, _ = l.cat.Buckets(ctx, info.Registration.TableID, -1)
		}
		return &adminv1.CreateTableResponse{Table: TableInfoToProto(info, buckets), Created: !info.Existed}, nil
	}, func(ctx context.Context, rec catalog.RequestRecord) (*adminv1.CreateTableResponse, error) {
		// The table as it is now when it is still the one created;
		// otherwise (dropped since) what the record holds.
		info, err := l.cat.GetTable(ctx, r.Database, r.Table)
		if err != nil || info.Registration.TableID != rec.TableID {
			return &adminv1.CreateTableResponse{Created: true,
				Table: &adminv1.TableInfo{Database: r.Database, Table: r.Table, TableId: rec.TableID}}, nil
		}
		var buckets []catalog.BucketInfo
		if !info.Registration.Partitioned() {
			buckets, _ = l.cat.Buckets(ctx, info.Registration.TableID, -1)
		}
		return &adminv1.CreateTableResponse{Table: TableInfoToProto(info, buckets), Created: true}, nil
	})
}

func (a *adminService) DropTable(ctx context.Context, r *adminv1.DropTableRequest) (*adminv1.DropTableResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	return once(a, ctx, l, adminv1.AdminService_DropTable_FullMethodName, r, func(ctx context.Context) (*adminv1.DropTableResponse, error) {
		rev, err := l.cat.DropTable(ctx, r.Database, r.Table, r.IgnoreIfNotExists)
		if err != nil {
			return nil, err
		}
		return &adminv1.DropTableResponse{Dropped: rev != 0}, nil
	}, func(context.Context, catalog.RequestRecord) (*adminv1.DropTableResponse, error) {
		return &adminv1.DropTableResponse{Dropped: true}, nil
	})
}

func (a *adminService) GetTableInfo(ctx context.Context, r *adminv1.GetTableInfoRequest) (*adminv1.GetTableInfoResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	info, err := l.cat.GetTable(ctx, r.Database, r.Table)
	if err != nil {
		return nil, err
	}
	var buckets []catalog.BucketInfo
	if !info.Registration.Partitioned() {
		buckets, _ = l.cat.Buckets(ctx, info.Registration.TableID, -1)
	}
	return &adminv1.GetTableInfoResponse{Table: TableInfoToProto(info, buckets)}, nil
}

func (a *adminService) ListTables(ctx context.Context, r *adminv1.ListTablesRequest) (*adminv1.ListTablesResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	names, err := l.cat.ListTables(ctx, r.Database)
	if err != nil {
		return nil, err
	}
	page, next, err := pageOf(names, self, r.PageSize, r.PageToken, "tables")
	if err != nil {
		return nil, err
	}
	return &adminv1.ListTablesResponse{Names: page, NextPageToken: next}, nil
}

func (a *adminService) CreatePartition(ctx context.Context, r *adminv1.CreatePartitionRequest) (*adminv1.CreatePartitionResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	return once(a, ctx, l, adminv1.AdminService_CreatePartition_FullMethodName, r, func(ctx context.Context) (*adminv1.CreatePartitionResponse, error) {
		p, rev, err := l.cat.CreatePartition(ctx, r.Database, r.Table, r.Partition, r.IgnoreIfExists)
		if err != nil {
			return nil, withField(err, partitionFields)
		}
		return &adminv1.CreatePartitionResponse{Partition: &adminv1.PartitionInfo{Name: p.Name,
			PartitionId: p.Registration.PartitionID, TableId: p.Registration.TableID}, Created: rev != 0}, nil
	}, func(_ context.Context, rec catalog.RequestRecord) (*adminv1.CreatePartitionResponse, error) {
		return &adminv1.CreatePartitionResponse{Partition: &adminv1.PartitionInfo{Name: r.Partition,
			PartitionId: rec.PartitionID, TableId: rec.TableID}, Created: true}, nil
	})
}

func (a *adminService) DropPartition(ctx context.Context, r *adminv1.DropPartitionRequest) (*adminv1.DropPartitionResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	return once(a, ctx, l, adminv1.AdminService_DropPartition_FullMethodName, r, func(ctx context.Context) (*adminv1.DropPartitionResponse, error) {
		rev, err := l.cat.DropPartition(ctx, r.Database, r.Table, r.Partition, r.IgnoreIfNotExists)
		if err != nil {
			return nil, err
		}
		return &adminv1.DropPartitionResponse{Dropped: rev != 0}, nil
	}, func(context.Context, catalog.RequestRecord) (*adminv1.DropPartitionResponse, error) {
		return &adminv1.DropPartitionResponse{Dropped: true}, nil
	})
}

func (a *adminService) ListPartitions(ctx context.Context, r *adminv1.ListPartitionsRequest) (*adminv1.ListPartitionsResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	ps, err := l.cat.ListPartitions(ctx, r.Database, r.Table)
	if err != nil {
		return nil, err
	}
	ps, next, err := pageOf(ps, func(p catalog.PartitionInfo) string { return p.Name }, r.PageSize, r.PageToken, "partitions")
	if err != nil {
		return nil, err
	}
	out := &adminv1.ListPartitionsResponse{NextPageToken: next}
	for _, p := range ps {
		out.Partitions = append(out.Partitions, &adminv1.PartitionInfo{Name: p.Name,
			PartitionId: p.Registration.PartitionID, TableId: p.Registration.TableID})
	}
	return out, nil
}

func (a *adminService) ListTabletServers(ctx context.Context, r *adminv1.ListTabletServersRequest) (*adminv1.ListTabletServersResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	servers, err := l.cat.ListTabletServers(ctx)
	if err != nil {
		return nil, err
	}
	tags, _ := l.cat.ServerTags(ctx)
	out := &adminv1.ListTabletServersResponse{}
	for _, ts := range servers {
		tag := int32(-1)
		if t, ok := tags[ts.ID]; ok {
			tag = t
		}
		reg := ts.Registration
		out.Servers = append(out.Servers, &adminv1.TabletServer{Id: ts.ID, Listeners: reg.Listeners,
			RegisterTimestamp: reg.RegisterTimestamp, Rack: reg.Rack, CpuCores: reg.CPUCores, MemoryBytes: reg.MemoryBytes, Tag: tag})
	}
	return out, nil
}

func (a *adminService) AllocateIDs(ctx context.Context, r *adminv1.AllocateIDsRequest) (*adminv1.AllocateIDsResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	return onceLookupFirst(a, ctx, l, adminv1.AdminService_AllocateIDs_FullMethodName, r, func(ctx context.Context) (*adminv1.AllocateIDsResponse, error) {
		first, err := l.cat.AllocateIDs(ctx, r.Counter, r.Count)
		if err != nil {
			return nil, withField(err, plainFields)
		}
		return &adminv1.AllocateIDsResponse{First: first, Count: r.Count}, nil
	}, func(_ context.Context, rec catalog.RequestRecord) (*adminv1.AllocateIDsResponse, error) {
		return &adminv1.AllocateIDsResponse{First: rec.First, Count: rec.Count}, nil
	})
}

func aclFromProto(e *adminv1.ACLEntry) catalog.ACLEntry {
	if e == nil {
		return catalog.ACLEntry{}
	}
	return catalog.ACLEntry{PrincipalType: e.PrincipalType, PrincipalName: e.PrincipalName,
		PermissionType: e.PermissionType, Host: e.Host, Operation: e.Operation}
}

func (a *adminService) AddACLs(ctx context.Context, r *adminv1.AddACLsRequest) (*adminv1.AddACLsResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	var entries []catalog.ACLEntry
	for _, e := range r.Acls {
		entries = append(entries, aclFromProto(e))
	}
	return once(a, ctx, l, adminv1.AdminService_AddACLs_FullMethodName, r, func(ctx context.Context) (*adminv1.AddACLsResponse, error) {
		added, err := l.cat.AddACLs(ctx, catalog.ResourceKey{Type: r.ResourceType, Name: r.ResourceName}, entries)
		if err != nil {
			return nil, withField(err, aclAddFields)
		}
		return &adminv1.AddACLsResponse{Added: int32(added)}, nil
	}, func(_ context.Context, rec catalog.RequestRecord) (*adminv1.AddACLsResponse, error) {
		return &adminv1.AddACLsResponse{Added: int32(rec.N)}, nil
	})
}

func (a *adminService) RemoveACLs(ctx context.Context, r *adminv1.RemoveACLsRequest) (*adminv1.RemoveACLsResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	return once(a, ctx, l, adminv1.AdminService_RemoveACLs_FullMethodName, r, func(ctx context.Context) (*adminv1.RemoveACLsResponse, error) {
		removed, err := l.cat.RemoveACLs(ctx, catalog.ResourceKey{Type: r.ResourceType, Name: r.ResourceName}, aclFromProto(r.Filter))
		if err != nil {
			return nil, withField(err, aclFilterFields)
		}
		return &adminv1.RemoveACLsResponse{Removed: int32(removed)}, nil
	}, func(_ context.Context, rec catalog.RequestRecord) (*adminv1.RemoveACLsResponse, error) {
		return &adminv1.RemoveACLsResponse{Removed: int32(rec.N)}, nil
	})
}

func (a *adminService) ListACLs(ctx context.Context, r *adminv1.ListACLsRequest) (*adminv1.ListACLsResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	list, err := l.cat.ListACLs(ctx, r.ResourceType)
	if err != nil {
		return nil, err
	}
	out := &adminv1.ListACLsResponse{}
	for _, ra := range list {
		pr := &adminv1.ResourceACLs{ResourceType: ra.Resource.Type, ResourceName: ra.Resource.Name}
		for _, e := range ra.ACLs {
			pr.Acls = append(pr.Acls, &adminv1.ACLEntry{PrincipalType: e.PrincipalType, PrincipalName: e.PrincipalName,
				PermissionType: e.PermissionType, Host: e.Host, Operation: e.Operation})
		}
		out.Resources = append(out.Resources, pr)
	}
	return out, nil
}

func (a *adminService) AlterConfigs(ctx context.Context, r *adminv1.AlterConfigsRequest) (*adminv1.AlterConfigsResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	return once(a, ctx, l, adminv1.AdminService_AlterConfigs_FullMethodName, r, func(ctx context.Context) (*adminv1.AlterConfigsResponse, error) {
		_, err := l.cat.AlterConfigs(ctx, r.Set, r.Remove)
		return &adminv1.AlterConfigsResponse{}, err
	}, func(context.Context, catalog.RequestRecord) (*adminv1.AlterConfigsResponse, error) {
		return &adminv1.AlterConfigsResponse{}, nil
	})
}

func (a *adminService) DescribeConfigs(ctx context.Context, r *adminv1.DescribeConfigsRequest) (*adminv1.DescribeConfigsResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	cfg, err := l.cat.Configs(ctx)
	return &adminv1.DescribeConfigsResponse{Configs: cfg}, err
}

func (a *adminService) SetServerTags(ctx context.Context, r *adminv1.SetServerTagsRequest) (*adminv1.SetServerTagsResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	return once(a, ctx, l, adminv1.AdminService_SetServerTags_FullMethodName, r, func(ctx context.Context) (*adminv1.SetServerTagsResponse, error) {
		_, err := l.cat.SetServerTags(ctx, r.ServerIds, r.Tag)
		if errors.Is(err, core.ErrNotFound) {
			err = &adminapi.FieldError{Field: "server_ids", Err: err}
		}
		return &adminv1.SetServerTagsResponse{}, withField(err, plainFields)
	}, func(context.Context, catalog.RequestRecord) (*adminv1.SetServerTagsResponse, error) {
		return &adminv1.SetServerTagsResponse{}, nil
	})
}

func (a *adminService) GetServerTags(ctx context.Context, r *adminv1.GetServerTagsRequest) (*adminv1.GetServerTagsResponse, error) {
	l, err := a.s.serving()
	if err != nil {
		return nil, err
	}
	tags, err := l.cat.ServerTags(ctx)
	return &adminv1.GetServerTagsResponse{Tags: tags}, err
}

func (a *adminService) GetLeader(ctx context.Context, r *adminv1.GetLeaderRequest) (*adminv1.GetLeaderResponse, error) {
	li := a.s.currentLeader()
	out := &adminv1.GetLeaderResponse{ThisId: a.s.id, ThisAddress: adminapi.HostPort(a.s.addr), IsLeader: a.s.IsLeader()}
	if l := a.s.leader.Load(); l != nil && !l.lost() {
		li = core.LeaderInfo{ID: a.s.id, Address: a.s.addr, Epoch: l.lead.Epoch()}
	} else if st, ok := a.s.consensusView(); li.ID == a.s.id || (ok && st.LeaderID == "") {
		// Stale: it lost the leadership, or its consensus view knows no
		// leader now (the one it observed last may be dead).
		li = core.LeaderInfo{}
	}
	out.LeaderId, out.LeaderAddress, out.Epoch = li.ID, adminapi.HostPort(li.Address), li.Epoch
	out.Coordinators = a.s.coordinators(leaderView{id: out.LeaderId, address: out.LeaderAddress, epoch: out.Epoch})
	if ref := a.s.backend.Load(); ref != nil {
		out.Backend = ref.b.Capabilities().Name
	}
	return out, nil
}
