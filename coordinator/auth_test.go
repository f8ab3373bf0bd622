package coordinator_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/tlsutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// securedServices are the services the authorization table must cover.
var securedServices = []string{"AdminService", "TabletServerService"}

// describedMethods returns the full method names ("/pkg.Service/Method")
// of the secured services, from the proto descriptor.
func describedMethods(t *testing.T) map[string]protoreflect.MethodDescriptor {
	t.Helper()
	fd := adminv1.File_metaplane_admin_v1_admin_proto
	out := map[string]protoreflect.MethodDescriptor{}
	for _, name := range securedServices {
		sd := fd.Services().ByName(protoreflect.Name(name))
		if sd == nil {
			t.Fatalf("no %s in the admin proto's descriptor", name)
		}
		for i := 0; i < sd.Methods().Len(); i++ {
			m := sd.Methods().Get(i)
			out[fmt.Sprintf("/%s/%s", sd.FullName(), m.Name())] = m
		}
	}
	return out
}

// TestAuthorizationTableCoversEveryMethod: every method of the admin and
// tablet-server services has a row in the authorization table, and every
// row is a method. A new RPC without a row fails here (and is refused at
// run time while security is on).
func TestAuthorizationTableCoversEveryMethod(t *testing.T) {
	table := coordinator.AccessTable()
	described := describedMethods(t)
	for m := range described {
		if _, ok := table[m]; !ok {
			t.Errorf("%s has no row in coordinator/authz.go's methodAccess: say which operation on which resource it needs", m)
		}
	}
	for m := range table {
		if _, ok := described[m]; !ok {
			t.Errorf("methodAccess has a row for %s, which the services do not have", m)
		}
	}
}

// secured is a memory-backed coordinator with TLS and the given security,
// and the CA its clients use.
type secured struct {
	*node
	ca    *testutil.CA
	store *memory.Store
}

// startSecured serves a coordinator over TLS (client certificates
// verified when given) with sec.
func startSecured(t *testing.T, sec coordinator.Security) *secured {
	t.Helper()
	ca := testutil.NewCA(t, "ca")
	cert := ca.ServerCert(t, "coordinator")
	r, err := tlsutil.NewReloader(tlsutil.Files{CertFile: cert.CertFile, KeyFile: cert.KeyFile, CAFile: ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	scfg, err := r.ServerConfig(tls.VerifyClientCertIfGiven)
	if err != nil {
		t.Fatal(err)
	}
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	n := harness.StartCoordinator(t, s, coordinator.Options{Credentials: credentials.NewTLS(scfg), Security: sec})
	testutil.WaitFor(t, 5*time.Second, "the secured coordinator leads", n.Srv.IsLeader)
	return &secured{node: n, ca: ca, store: s}
}

// as returns a gRPC connection to the coordinator with the client
// certificate of cn ("" for none) and, when user is set, its password.
func (s *secured) as(t *testing.T, cn, user, password string) *grpc.ClientConn {
	t.Helper()
	files := tlsutil.Files{CAFile: s.ca.CertFile}
	if cn != "" {
		c := s.ca.ClientCert(t, cn)
		files.CertFile, files.KeyFile = c.CertFile, c.KeyFile
	}
	cfg, err := tlsutil.ClientConfig(files)
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	if user != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(adminapi.PasswordCredentials(user, password)))
	}
	cc, err := grpc.NewClient(s.Addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// grant adds one ACL entry through the admin API as a.
func grant(t *testing.T, a adminv1.AdminServiceClient, resType, resName, principal, perm, op, host string) {
	t.Helper()
	_, err := a.AddACLs(ctx10(t), &adminv1.AddACLsRequest{ResourceType: resType, ResourceName: resName,
		Acls: []*adminv1.ACLEntry{{PrincipalType: "USER", PrincipalName: principal, PermissionType: perm, Operation: op, Host: host}}})
	if err != nil {
		t.Fatalf("grant %s %s %s on %s %s: %v", principal, perm, op, resType, resName, err)
	}
}

// wantDenied checks that err is PERMISSION_DENIED naming op and the
// resource.
func wantDenied(t *testing.T, err error, op, resource string) {
	t.Helper()
	if status.Code(err) != codes.PermissionDenied || !errors.Is(adminapi.FromStatus(err), adminapi.ErrPermissionDenied) {
		t.Fatalf("got %v, want PERMISSION_DENIED", err)
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, " "+op+" on "+resource) {
		t.Fatalf("PERMISSION_DENIED %q does not name %s on %s", msg, op, resource)
	}
}

var superAdmin = []config.Principal{{Type: "User", Name: "admin"}}

// TestPrincipalWithoutACLsIsDeniedEverywhere: with the authorizer on, a
// principal (User:bob from his certificate) without any ACL is refused
// every method of both services (walked from the descriptor, with empty
// requests) with PERMISSION_DENIED naming the operation; the filtered
// lists answer without the entries he may not see; and nothing changed.
func TestPrincipalWithoutACLsIsDeniedEverywhere(t *testing.T) {
	s := startSecured(t, coordinator.Security{Authorize: true, SuperUsers: superAdmin})
	admin := adminv1.NewAdminServiceClient(s.as(t, "admin", "", ""))
	if _, err := admin.CreateDatabase(ctx10(t), &adminv1.CreateDatabaseRequest{Name: "db1"}); err != nil {
		t.Fatalf("the super user creates a database: %v", err)
	}
	if _, err := admin.CreateTable(ctx10(t), &adminv1.CreateTableRequest{Database: "db1", Table: "t1", Descriptor_: &adminv1.TableDescriptor{
		Columns: []*adminv1.Column{{Name: "id", Type: "INT"}}, BucketCount: 1, ReplicationFactor: 1}}); err != nil {
		t.Fatalf("the super user creates a table: %v", err)
	}
	before := snapshot(t, s.store)

	bob := s.as(t, "bob", "", "")
	table := coordinator.AccessTable()
	for method, md := range describedMethods(t) {
		t.Run(string(md.Name()), func(t *testing.T) {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
			if err != nil {
				t.Fatal(err)
			}
			rt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
			if err != nil {
				t.Fatal(err)
			}
			req, resp := mt.New().Interface(), rt.New().Interface()
			switch r := req.(type) {
			case *adminv1.ListTablesRequest:
				r.Database = "db1"
			}
			err = bob.Invoke(ctx10(t), method, req, resp)
			if table[method] == "" { // a filtered list: answered without what bob may not see
				if err != nil {
					t.Fatalf("filtered list: %v", err)
				}
				if n := namesOf(resp); len(n) != 0 {
					t.Fatalf("bob, without ACLs, sees %v", n)
				}
				return
			}
			if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("got %v, want PERMISSION_DENIED", err)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, "User:bob may not "+table[method]+" on ") || !strings.Contains(msg, "no ACL allows it") {
				t.Fatalf("PERMISSION_DENIED says %q; want it to name User:bob and %s", msg, table[method])
			}
		})
	}
	if after := snapshot(t, s.store); after != before {
		t.Errorf("the refused calls changed the store:\nbefore %s\nafter  %s", before, after)
	}
}

func namesOf(m proto.Message) []string {
	switch r := m.(type) {
	case *adminv1.ListDatabasesResponse:
		return r.Names
	case *adminv1.ListTablesResponse:
		return r.Names
	}
	return nil
}

// snapshot renders every path of the store with its version: what a
// refused call must leave as it was.
func snapshot(t *testing.T, s *memory.Store) string {
	t.Helper()
	c := s.NewClient(core.ClientOptions{})
	defer c.Close()
	var b strings.Builder
	var walk func(p string)
	walk = func(p string) {
		n, err := core.Get(context.Background(), c, p)
		if err == nil {
			fmt.Fprintf(&b, "%s@%d ", p, n.Stat.Version)
		}
		kids, _, err := c.Children(context.Background(), p, core.ReadOptions{})
		if err != nil {
			return
		}
		sort.Strings(kids)
		for _, k := range kids {
			if p == "/" {
				walk("/" + k)
			} else {
				walk(p + "/" + k)
			}
		}
	}
	walk("/")
	return b.String()
}

// TestAllowGrantsExactlyThatOperation: an ALLOW of CREATE on a database
// lets its principal create tables in it and nothing else: not in another
// database, not drop, not change the cluster; DESCRIBE of the database is
// implied, and the database list shows only it.
func TestAllowGrantsExactlyThatOperation(t *testing.T) {
	s := startSecured(t, coordinator.Security{Authorize: true, SuperUsers: superAdmin})
	admin := adminv1.NewAdminServiceClient(s.as(t, "admin", "", ""))
	for _, db := range []string{"db1", "db2"} {
		if _, err := admin.CreateDatabase(ctx10(t), &adminv1.CreateDatabaseRequest{Name: db}); err != nil {
			t.Fatal(err)
		}
	}
	grant(t, admin, "DATABASE", "db1", "bob", "ALLOW", "CREATE", "*")
	bob := adminv1.NewAdminServiceClient(s.as(t, "bob", "", ""))
	td := &adminv1.TableDescriptor{Columns: []*adminv1.Column{{Name: "id", Type: "INT"}}, BucketCount: 1, ReplicationFactor: 1}

	if _, err := bob.CreateTable(ctx10(t), &adminv1.CreateTableRequest{Database: "db1", Table: "t", Descriptor_: td}); err != nil {
		t.Fatalf("CREATE on DATABASE db1 does not let bob create db1.t: %v", err)
	}
	_, err := bob.CreateTable(ctx10(t), &adminv1.CreateTableRequest{Database: "db2", Table: "t", Descriptor_: td})
	wantDenied(t, err, "CREATE", "DATABASE db2")
	_, err = bob.DropTable(ctx10(t), &adminv1.DropTableRequest{Database: "db1", Table: "t"})
	wantDenied(t, err, "DROP", "TABLE db1.t")
	_, err = bob.CreateDatabase(ctx10(t), &adminv1.CreateDatabaseRequest{Name: "db3"})
	wantDenied(t, err, "CREATE", "CLUSTER fluss-cluster")
	_, err = bob.AlterConfigs(ctx10(t), &adminv1.AlterConfigsRequest{Set: map[string]string{"k": "v"}})
	wantDenied(t, err, "ALTER", "CLUSTER fluss-cluster")
	if _, err := bob.GetDatabase(ctx10(t), &adminv1.GetDatabaseRequest{Name: "db1"}); err != nil {
		t.Errorf("CREATE does not imply DESCRIBE on db1: %v", err)
	}
	_, err = bob.GetDatabase(ctx10(t), &adminv1.GetDatabaseRequest{Name: "db2"})
	wantDenied(t, err, "DESCRIBE", "DATABASE db2")
	r, err := bob.ListDatabases(ctx10(t), &adminv1.ListDatabasesRequest{})
	if err != nil || len(r.Names) != 1 || r.Names[0] != "db1" {
		t.Errorf("bob lists %v, %v; want [db1] (the one he may DESCRIBE)", r.GetNames(), err)
	}
	// The table inherits the database's grant (CREATE implies DESCRIBE).
	if _, err := bob.GetTableInfo(ctx10(t), &adminv1.GetTableInfoRequest{Database: "db1", Table: "t"}); err != nil {
		t.Errorf("DESCRIBE of db1.t through the database's CREATE: %v", err)
	}
	// Only ALTER on the cluster changes ACLs.
	_, err = bob.AddACLs(ctx10(t), &adminv1.AddACLsRequest{ResourceType: "DATABASE", ResourceName: "db2",
		Acls: []*adminv1.ACLEntry{{PrincipalType: "USER", PrincipalName: "bob", PermissionType: "ALLOW", Operation: "ALL", Host: "*"}}})
	wantDenied(t, err, "ALTER", "CLUSTER fluss-cluster")
	grant(t, admin, "CLUSTER", "fluss-cluster", "bob", "ALLOW", "ALTER", "*")
	grant(t, adminv1.NewAdminServiceClient(s.as(t, "bob", "", "")), "DATABASE", "db2", "carol", "ALLOW", "READ", "*")
}

// TestDenyBeatsAllow: ALL on the cluster is overruled by a DENY of one
// operation on one table (from any host), and a DENY from another host
// does not apply; the wildcard principal User:* and resource * match.
func TestDenyBeatsAllow(t *testing.T) {
	s := startSecured(t, coordinator.Security{Authorize: true, SuperUsers: superAdmin})
	admin := adminv1.NewAdminServiceClient(s.as(t, "admin", "", ""))
	td := &adminv1.TableDescriptor{Columns: []*adminv1.Column{{Name: "id", Type: "INT"}}, BucketCount: 1, ReplicationFactor: 1}
	if _, err := admin.CreateDatabase(ctx10(t), &adminv1.CreateDatabaseRequest{Name: "db1"}); err != nil {
		t.Fatal(err)
	}
	for _, tb := range []string{"t", "u", "v"} {
		if _, err := admin.CreateTable(ctx10(t), &adminv1.CreateTableRequest{Database: "db1", Table: tb, Descriptor_: td}); err != nil {
			t.Fatal(err)
		}
	}
	grant(t, admin, "CLUSTER", "fluss-cluster", "bob", "ALLOW", "ALL", "*")
	grant(t, admin, "TABLE", "db1.t", "bob", "DENY", "DROP", "*")
	grant(t, admin, "TABLE", "db1.u", "bob", "DENY", "DROP", "10.9.9.9") // another host: does not apply
	grant(t, admin, "TABLE", "*", "*", "DENY", "ALTER", "*")             // everyone, every table
	bob := adminv1.NewAdminServiceClient(s.as(t, "bob", "", ""))
	_, err := bob.DropTable(ctx10(t), &adminv1.DropTableRequest{Database: "db1", Table: "t"})
	wantDenied(t, err, "DROP", "TABLE db1.t")
	if !strings.Contains(err.Error(), "denied by a DENY ACL") {
		t.Errorf("the refusal does not say a DENY did it: %v", err)
	}
	if _, err := bob.DropTable(ctx10(t), &adminv1.DropTableRequest{Database: "db1", Table: "u"}); err != nil {
		t.Errorf("a DENY from another host refused bob: %v", err)
	}
	if _, err := bob.GetTableInfo(ctx10(t), &adminv1.GetTableInfoRequest{Database: "db1", Table: "t"}); err != nil {
		t.Errorf("a DENY of DROP refused DESCRIBE: %v", err)
	}
	if _, err := bob.DropTable(ctx10(t), &adminv1.DropTableRequest{Database: "db1", Table: "v"}); err != nil {
		t.Errorf("ALLOW ALL on the cluster does not let bob drop db1.v: %v", err)
	}
}

// TestSuperUserIsAllowedEverything: a super user with no ACL at all may
// call every method (none answers PERMISSION_DENIED), and the authorizer
// does not apply on a coordinator where it is off.
func TestSuperUserIsAllowedEverything(t *testing.T) {
	s := startSecured(t, coordinator.Security{Authorize: true, SuperUsers: superAdmin})
	admin := s.as(t, "admin", "", "")
	for method, md := range describedMethods(t) {
		mt, _ := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
		rt, _ := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
		err := admin.Invoke(ctx10(t), method, mt.New().Interface(), rt.New().Interface())
		if c := status.Code(err); c == codes.PermissionDenied || c == codes.Unauthenticated {
			t.Errorf("%s as the super user: %v", method, err)
		}
	}
	off := startSecured(t, coordinator.Security{})
	if _, err := adminv1.NewAdminServiceClient(off.as(t, "bob", "", "")).CreateDatabase(ctx10(t), &adminv1.CreateDatabaseRequest{Name: "db1"}); err != nil {
		t.Errorf("with the authorizer off bob is refused: %v", err)
	}
}

// TestPasswordListener: on a SASL_SSL listener a call without a password,
// with a wrong one or of an unknown user fails UNAUTHENTICATED and
// changes nothing; a plaintext client is refused at the connection; the
// right password authenticates User:<name>, which the authorizer checks.
func TestPasswordListener(t *testing.T) {
	s := startSecured(t, coordinator.Security{Passwords: coordinator.NewPasswords(map[string]string{"alice": "wonderland", "admin": "root-pw"}),
		Authorize: true, SuperUsers: superAdmin})
	before := snapshot(t, s.store)
	for _, tt := range []struct{ name, user, pw, frag string }{
		{"no password", "", "", "needs a username and password"},
		{"wrong password", "alice", "wonderlan", "wrong username or password"},
		{"unknown user", "mallory", "wonderland", "wrong username or password"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := adminv1.NewAdminServiceClient(s.as(t, "admin", tt.user, tt.pw)).CreateDatabase(ctx10(t), &adminv1.CreateDatabaseRequest{Name: "x"})
			if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tt.frag) {
				t.Fatalf("got %v, want UNAUTHENTICATED (%s)", err, tt.frag)
			}
			if !errors.Is(adminapi.FromStatus(err), adminapi.ErrUnauthenticated) {
				t.Errorf("FromStatus does not give ErrUnauthenticated: %v", adminapi.FromStatus(err))
			}
			if strings.Contains(err.Error(), "wonderlan") {
				t.Errorf("the answer repeats the password: %v", err)
			}
		})
	}
	if after := snapshot(t, s.store); after != before {
		t.Errorf("refused calls changed the store")
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer pcancel()
	if _, err := dialAdmin(t, s.Addr).CreateDatabase(pctx, &adminv1.CreateDatabaseRequest{Name: "x"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("a plaintext client on the SASL_SSL listener: %v, want refused at the connection (UNAVAILABLE)", err)
	}
	if _, err := adminclient.NewClientWithOptions([]string{s.Addr}, adminclient.Options{Username: "alice", Password: "wonderland"}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("a password without TLS: %v, want ErrInvalidArgument", err)
	}

	cfg, err := tlsutil.ClientConfig(tlsutil.Files{CAFile: s.ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	alice, err := adminclient.NewClientWithOptions([]string{s.Addr}, adminclient.Options{TLS: cfg, Username: "alice", Password: "wonderland"})
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	err = createDatabase(alice, "db1")
	if !errors.Is(err, adminapi.ErrPermissionDenied) || !strings.Contains(err.Error(), "User:alice may not CREATE") {
		t.Fatalf("alice without ACLs: %v, want PERMISSION_DENIED for User:alice", err)
	}
	grant(t, adminv1.NewAdminServiceClient(s.as(t, "", "admin", "root-pw")), "CLUSTER", "fluss-cluster", "alice", "ALLOW", "CREATE", "*")
	if err := createDatabase(alice, "db1"); err != nil {
		t.Fatalf("alice with CREATE on the cluster: %v", err)
	}
}

// TestPasswordsReplace: Replace swaps the users at once.
func TestPasswordsReplace(t *testing.T) {
	p := coordinator.NewPasswords(map[string]string{"a": "1"})
	if !p.Check("a", "1") || p.Check("a", "2") || p.Check("b", "1") {
		t.Fatal("Check is wrong before Replace")
	}
	p.Replace(map[string]string{"b": "2"})
	if p.Check("a", "1") || !p.Check("b", "2") {
		t.Fatal("Replace did not swap the users")
	}
}

// securedHA is the Raft scenario of TestHA with the client listener on
// mutual TLS and the authorizer on: the test's clients are the super user
// User:admin; the tablet servers authenticate as User:tablet-server with
// certificates of their own and register and follow the metadata through
// the ACLs granted to them (WRITE and READ on the cluster).
func securedHA(t *testing.T, raft haBackend) haBackend {
	ca := testutil.NewCA(t, "ha-ca")
	// The coordinators and the tablet servers each serve and dial the
	// other: their certificates are for both.
	peer := func(cn string) testutil.CertFiles {
		return ca.Issue(t, cn, testutil.CertOptions{CommonName: cn, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true})
	}
	srv := peer("coordinator")
	admin := ca.ClientCert(t, "admin")
	ts := peer("tablet-server")
	tlsArgs := func(cert testutil.CertFiles) []string {
		return []string{"-D", "security.protocol.map=CLIENT:SSL", "-D", "security.tls.ca-file=" + ca.CertFile,
			"-D", "security.tls.cert-file=" + cert.CertFile, "-D", "security.tls.key-file=" + cert.KeyFile}
	}
	b := raft
	b.name, b.backend = "raft-tls-authorizer", "raft"
	b.coordinatorArgs = func(t *testing.T, i int, clients []string) []string {
		return append(append(raft.coordinatorArgs(t, i, clients), tlsArgs(srv)...),
			"-D", "security.tls.client-auth=required", "-D", "authorizer.enabled=true", "-D", "super.users=User:admin")
	}
	b.tabletArgs = func(t *testing.T, clients []string) []string {
		// The tablet service lets in only the coordinators (and the test,
		// as User:admin).
		return append(append(raft.tabletArgs(t, clients), tlsArgs(ts)...),
			"-D", "security.tls.client-auth=required", "-D", "authorizer.enabled=true", "-D", "super.users=User:coordinator;User:admin")
	}
	b.secure = func(t *testing.T) {
		cfg, err := tlsutil.ClientConfig(tlsutil.Files{CAFile: ca.CertFile, CertFile: admin.CertFile, KeyFile: admin.KeyFile})
		if err != nil {
			t.Fatal(err)
		}
		haClientOptions, dialCreds = adminclient.Options{TLS: cfg}, credentials.NewTLS(cfg)
		t.Cleanup(func() { haClientOptions, dialCreds = adminclient.Options{}, insecure.NewCredentials() })
	}
	b.grant = func(t *testing.T, ctx context.Context, c *adminclient.Client) {
		// Before the grant the tablet servers' calls are refused: check it
		// on one, as the tablet-server principal.
		tcfg, err := tlsutil.ClientConfig(tlsutil.Files{CAFile: ca.CertFile, CertFile: ts.CertFile, KeyFile: ts.KeyFile})
		if err != nil {
			t.Fatal(err)
		}
		tc, err := adminclient.NewClientWithOptions([]string{c.Leader()}, adminclient.Options{TLS: tcfg})
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		err = tc.Tablets(ctx, func(ctx context.Context, t adminv1.TabletServerServiceClient) error {
			_, err := t.FetchMetadataSnapshot(ctx, &adminv1.FetchMetadataSnapshotRequest{})
			return err
		})
		if !errors.Is(err, adminapi.ErrPermissionDenied) || !strings.Contains(err.Error(), "User:tablet-server may not READ") {
			t.Fatalf("the tablet servers' principal before its grant: %v, want PERMISSION_DENIED", err)
		}
		for _, op := range []string{"WRITE", "READ"} {
			if err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
				_, err := a.AddACLs(ctx, &adminv1.AddACLsRequest{ResourceType: "CLUSTER", ResourceName: "fluss-cluster",
					Acls: []*adminv1.ACLEntry{{PrincipalType: "USER", PrincipalName: "tablet-server", PermissionType: "ALLOW", Operation: op, Host: "*"}}})
				return err
			}); err != nil {
				t.Fatalf("grant the tablet servers %s: %v", op, err)
			}
		}
	}
	return b
}

// TestCertificateWithoutCommonName: a verified client certificate whose
// subject has no CN gives no principal: UNAUTHENTICATED, saying why.
func TestCertificateWithoutCommonName(t *testing.T) {
	s := startSecured(t, coordinator.Security{Authorize: true, SuperUsers: superAdmin})
	c := s.ca.Issue(t, "nameless", testutil.CertOptions{Client: true})
	cfg, err := tlsutil.ClientConfig(tlsutil.Files{CAFile: s.ca.CertFile, CertFile: c.CertFile, KeyFile: c.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = adminv1.NewAdminServiceClient(cc).ListDatabases(ctx10(t), &adminv1.ListDatabasesRequest{})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "has no common name") {
		t.Fatalf("got %v, want UNAUTHENTICATED for a certificate without a CN", err)
	}
}

// TestStandbyAuthorizes: a standby checks the calls it answers itself
// (GetLeader) against the ACLs, read from the backend: bob is refused
// until the leader stores his grant, then the standby lets him in.
func TestStandbyAuthorizes(t *testing.T) {
	s := startSecured(t, coordinator.Security{Authorize: true, SuperUsers: superAdmin})
	// A second coordinator on the same store, with the same TLS and
	// security: a standby.
	cert := s.ca.ServerCert(t, "standby")
	r, err := tlsutil.NewReloader(tlsutil.Files{CertFile: cert.CertFile, KeyFile: cert.KeyFile, CAFile: s.ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	scfg, err := r.ServerConfig(tls.VerifyClientCertIfGiven)
	if err != nil {
		t.Fatal(err)
	}
	sb := harness.StartCoordinator(t, s.store, coordinator.Options{Credentials: credentials.NewTLS(scfg),
		Security: coordinator.Security{Authorize: true, SuperUsers: superAdmin}})
	standby := &secured{node: sb, ca: s.ca, store: s.store}
	bob := adminv1.NewAdminServiceClient(standby.as(t, "bob", "", ""))
	testutil.WaitFor(t, 5*time.Second, "the standby knows the leader", func() bool {
		r, err := adminv1.NewAdminServiceClient(standby.as(t, "admin", "", "")).GetLeader(ctx10(t), &adminv1.GetLeaderRequest{})
		return err == nil && !r.IsLeader && r.LeaderAddress == s.Addr
	})
	_, err = bob.GetLeader(ctx10(t), &adminv1.GetLeaderRequest{})
	wantDenied(t, err, "DESCRIBE", "CLUSTER fluss-cluster")
	grant(t, adminv1.NewAdminServiceClient(s.as(t, "admin", "", "")), "CLUSTER", "fluss-cluster", "bob", "ALLOW", "DESCRIBE", "*")
	if r, err := bob.GetLeader(ctx10(t), &adminv1.GetLeaderRequest{}); err != nil || r.LeaderAddress != s.Addr {
		t.Fatalf("bob with DESCRIBE on the cluster, on the standby: %v, %v", r, err)
	}
}
