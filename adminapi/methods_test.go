package adminapi

import (
	"testing"

	"google.golang.org/grpc"

	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// TestEveryAdminMethodIsClassified: every method of the admin and
// tablet-server services is either repeat-safe (a read, or a tablet-server
// call whose repetition has the effect of one) or a write that Do repeats
// only when known not applied; a new method must be put on one side.
func TestEveryAdminMethodIsClassified(t *testing.T) {
	writes := map[string]bool{}
	for _, m := range []string{"AddACLs", "AllocateIDs", "AlterConfigs", "CreateDatabase", "CreatePartition", "CreateTable",
		"DropDatabase", "DropPartition", "DropTable", "RemoveACLs", "SetServerTags", "TransferRaftLeadership",
		"AddRaftVoter", "RemoveRaftVoter"} {
		writes["/"+adminv1.AdminService_ServiceDesc.ServiceName+"/"+m] = true
	}
	for _, sd := range []grpc.ServiceDesc{adminv1.AdminService_ServiceDesc, adminv1.TabletServerService_ServiceDesc} {
		for _, m := range sd.Methods {
			full := "/" + sd.ServiceName + "/" + m.MethodName
			if (SemanticsOf(full) == RetrySafe) == writes[full] {
				t.Errorf("%s is classified %v as a repeat-safe call and %v as a write: put it on exactly one side", full, SemanticsOf(full) == RetrySafe, writes[full])
			}
		}
	}
}

// TestExactlyOnceMethodsAreWrites: every exactly-once method is a write of
// the admin service (the coordinator records its request id), and the
// table names only methods that exist.
func TestExactlyOnceMethodsAreWrites(t *testing.T) {
	known := map[string]bool{}
	for _, sd := range []grpc.ServiceDesc{adminv1.AdminService_ServiceDesc, adminv1.TabletServerService_ServiceDesc} {
		for _, m := range sd.Methods {
			known["/"+sd.ServiceName+"/"+m.MethodName] = true
		}
		for _, m := range sd.Streams {
			known["/"+sd.ServiceName+"/"+m.StreamName] = true
		}
	}
	once := 0
	for full, sem := range methods {
		if !known[full] {
			t.Errorf("the table names %s, which no service has", full)
		}
		if sem == ExactlyOnce {
			once++
			if want := "/" + adminv1.AdminService_ServiceDesc.ServiceName + "/"; len(full) <= len(want) || full[:len(want)] != want {
				t.Errorf("%s is exactly-once but not an admin write", full)
			}
		}
	}
	if once == 0 {
		t.Fatal("no exactly-once method: the check would check nothing")
	}
}
