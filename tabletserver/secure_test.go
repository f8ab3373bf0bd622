package tabletserver_test

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/internal/authn"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/tlsutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
	"github.com/metaplane/metaplane/tabletserver"
)

// peerCert issues a certificate for 127.0.0.1 usable both to serve and to
// dial (a coordinator and a tablet server are each the other's client).
func peerCert(t *testing.T, ca *testutil.CA, cn string) testutil.CertFiles {
	return ca.Issue(t, cn, testutil.CertOptions{CommonName: cn, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true})
}

func serverTLS(t *testing.T, ca *testutil.CA, c testutil.CertFiles) credentials.TransportCredentials {
	r, err := tlsutil.NewReloader(tlsutil.Files{CertFile: c.CertFile, KeyFile: c.KeyFile, CAFile: ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.ServerConfig(tls.RequireAndVerifyClientCert)
	if err != nil {
		t.Fatal(err)
	}
	return credentials.NewTLS(cfg)
}

func clientTLS(t *testing.T, ca *testutil.CA, c *testutil.CertFiles) *tls.Config {
	f := tlsutil.Files{CAFile: ca.CertFile}
	if c != nil {
		f.CertFile, f.KeyFile = c.CertFile, c.KeyFile
	}
	cfg, err := tlsutil.ClientConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startTLSCoordinator starts a leading coordinator on a memory store,
// serving creds and dialing the tablet servers with tabletTLS.
func startTLSCoordinator(t *testing.T, creds credentials.TransportCredentials, tabletTLS *tls.Config) (*coordinator.Server, string) {
	c := harness.StartLeader(t, coordinator.Options{Credentials: creds, TabletTLS: tabletTLS, TabletServerSessionTimeout: 2 * time.Second})
	return c.Srv, c.Addr
}

func dialWith(t *testing.T, addr string, opts ...grpc.DialOption) adminv1.TabletServiceClient {
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return adminv1.NewTabletServiceClient(cc)
}

// TestSecuredTabletService: a tablet service on mutual TLS with the
// authorizer on lets in only its allowed principal (the coordinator's
// certificate): a plaintext caller, a TLS caller without a certificate and
// a principal not allowed are refused, and a refused notification changes
// nothing; the coordinator leader's own notifications, sent with its
// certificate, are accepted.
func TestSecuredTabletService(t *testing.T) {
	ca := testutil.NewCA(t, "ca")
	coordCert, tsCert, alice := peerCert(t, ca, "coordinator"), peerCert(t, ca, "tablet-server-3"), ca.ClientCert(t, "alice")

	srv, cl := startTLSCoordinator(t, serverTLS(t, ca, coordCert), clientTLS(t, ca, &coordCert))

	coordinatorPrincipal := config.Principal{Type: config.PrincipalUser, Name: "coordinator"}
	ts, err := tabletserver.New(tabletserver.Options{ID: 3, Listener: harness.Listen(t), Logger: testutil.Logger(t),
		Credentials: serverTLS(t, ca, tsCert), Security: tabletserver.Security{Authorize: true, Allowed: []config.Principal{coordinatorPrincipal}},
		Seeds: []string{cl}, TLS: clientTLS(t, ca, &tsCert)})
	if err != nil {
		t.Fatal(err)
	}
	harness.Run(t, ts.Serve)
	testutil.WaitFor(t, 10*time.Second, "registered", ts.Registered)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The leader's notification arrives over mutual TLS as User:coordinator.
	asCoordinator := dialWith(t, ts.Address(), grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(t, ca, &coordCert))))
	testutil.WaitFor(t, 15*time.Second, "the leader's notification accepted", func() bool {
		st, err := asCoordinator.GetTabletServerState(ctx, &adminv1.GetTabletServerStateRequest{})
		return err == nil && st.NotifiedEpoch == srv.Epoch() && st.NotifiedEpoch >= 0
	})
	epoch := ts.Epoch()

	stale := &adminv1.NotifyLeaderAndIsrRequest{CoordinatorEpoch: epoch + 100, CoordinatorId: "intruder",
		Buckets: []*adminv1.NotifyLeaderAndIsrRequest_BucketState{{TableId: 1, Bucket: 0, Leader: 9}}}
	for _, tt := range []struct {
		name   string
		client adminv1.TabletServiceClient
		code   codes.Code
		says   string
	}{
		{"plaintext", dialWith(t, ts.Address(), grpc.WithTransportCredentials(insecure.NewCredentials())), codes.Unavailable, ""},
		{"TLS without a client certificate", dialWith(t, ts.Address(), grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(t, ca, nil)))), codes.Unavailable, ""},
		{"a principal not allowed", dialWith(t, ts.Address(), grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(t, ca, &alice)))),
			codes.PermissionDenied, "User:alice may not call /metaplane.admin.v1.TabletService/NotifyLeaderAndIsr"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			_, err := tt.client.NotifyLeaderAndIsr(cctx, stale)
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.says) {
				t.Fatalf("NotifyLeaderAndIsr: %v, want %v %q", err, tt.code, tt.says)
			}
			if _, err := tt.client.GetTabletServerState(cctx, &adminv1.GetTabletServerStateRequest{}); status.Code(err) != tt.code {
				t.Fatalf("GetTabletServerState: %v, want %v", err, tt.code)
			}
		})
	}
	if got := ts.Epoch(); got != epoch {
		t.Errorf("after refused notifications the epoch is %d, want %d (unchanged)", got, epoch)
	}
	st, err := asCoordinator.GetTabletServerState(ctx, &adminv1.GetTabletServerStateRequest{})
	if err != nil || st.NotifiedEpoch != srv.Epoch() {
		t.Errorf("state after refused notifications: %v, %v; want the leader's epoch %d as last notified", st, err, srv.Epoch())
	}
}

// TestSASLTabletService: on a SASL_SSL tablet service a call without a
// password, or with a wrong one, is UNAUTHENTICATED; the right one is let
// in as User:<username>, which the authorizer then checks.
func TestSASLTabletService(t *testing.T) {
	ca := testutil.NewCA(t, "ca")
	tsCert := peerCert(t, ca, "tablet-server-4")
	r, err := tlsutil.NewReloader(tlsutil.Files{CertFile: tsCert.CertFile, KeyFile: tsCert.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	scfg, err := r.ServerConfig(tls.NoClientCert)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := tabletserver.New(tabletserver.Options{ID: 4, Listener: harness.Listen(t), Logger: testutil.Logger(t), Credentials: credentials.NewTLS(scfg),
		Security: tabletserver.Security{Passwords: authn.NewPasswords(map[string]string{"coord": "s3cret", "bob": "hunter2"}), Authorize: true,
			Allowed: []config.Principal{{Type: config.PrincipalUser, Name: "coord"}}},
		Seeds: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	harness.Run(t, ts.Serve)
	tlsOnly := grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(t, ca, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tt := range []struct {
		name  string
		extra []grpc.DialOption
		code  codes.Code
	}{
		{"no password", nil, codes.Unauthenticated},
		{"wrong password", []grpc.DialOption{grpc.WithPerRPCCredentials(adminapi.PasswordCredentials("coord", "guess"))}, codes.Unauthenticated},
		{"a user not allowed", []grpc.DialOption{grpc.WithPerRPCCredentials(adminapi.PasswordCredentials("bob", "hunter2"))}, codes.PermissionDenied},
		{"the allowed user", []grpc.DialOption{grpc.WithPerRPCCredentials(adminapi.PasswordCredentials("coord", "s3cret"))}, codes.OK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := dialWith(t, ts.Address(), append([]grpc.DialOption{tlsOnly}, tt.extra...)...)
			_, err := c.NotifyLeaderAndIsr(ctx, &adminv1.NotifyLeaderAndIsrRequest{CoordinatorEpoch: 5})
			if status.Code(err) != tt.code {
				t.Fatalf("NotifyLeaderAndIsr: %v, want %v", err, tt.code)
			}
			if want := map[bool]int64{true: 5, false: -1}[tt.code == codes.OK]; ts.Epoch() != want {
				t.Fatalf("epoch after the call: %d, want %d", ts.Epoch(), want)
			}
		})
	}
}
