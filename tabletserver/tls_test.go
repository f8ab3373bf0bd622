package tabletserver_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/tlsutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
	"github.com/metaplane/metaplane/tabletserver"
)

// TestRegistersThroughTLSCoordinator: a coordinator that requires client
// certificates registers a tablet server that dials it with its own
// certificate, and lists it; a tablet server without one never registers.
func TestRegistersThroughTLSCoordinator(t *testing.T) {
	ca := testutil.NewCA(t, "ca")
	srvCert := ca.ServerCert(t, "coordinator")
	r, err := tlsutil.NewReloader(tlsutil.Files{CertFile: srvCert.CertFile, KeyFile: srvCert.KeyFile, CAFile: ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	scfg, err := r.ServerConfig(tls.RequireAndVerifyClientCert)
	if err != nil {
		t.Fatal(err)
	}
	_, l := startTLSCoordinator(t, credentials.NewTLS(scfg), nil)

	// Without a client certificate: refused, so not registered.
	anon, err := tlsutil.ClientConfig(tlsutil.Files{CAFile: ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := tabletserver.New(tabletserver.Options{ID: 8, Listener: harness.Listen(t), Logger: testutil.Logger(t),
		Seeds: []string{l}, TLS: anon})
	if err != nil {
		t.Fatal(err)
	}
	stopStranger := harness.Run(t, stranger.Serve)

	tsCert := ca.Issue(t, "tablet-server-7", testutil.CertOptions{CommonName: "tablet-server-7", Client: true})
	ccfg, err := tlsutil.ClientConfig(tlsutil.Files{CAFile: ca.CertFile, CertFile: tsCert.CertFile, KeyFile: tsCert.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := tabletserver.New(tabletserver.Options{ID: 7, Listener: harness.Listen(t), Logger: testutil.Logger(t),
		Seeds: []string{l}, TLS: ccfg})
	if err != nil {
		t.Fatal(err)
	}
	harness.Run(t, ts.Serve)
	testutil.WaitFor(t, 10*time.Second, "registered through TLS", ts.Registered)

	admin, err := adminclient.NewClientWithOptions([]string{l}, adminclient.Options{TLS: ccfg})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ids []int32
	if err := admin.Admin(ctx, func(ctx context.Context, c adminv1.AdminServiceClient) error {
		r, err := c.ListTabletServers(ctx, &adminv1.ListTabletServersRequest{})
		for _, s := range r.GetServers() {
			ids = append(ids, s.GetId())
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 || ids[0] != 7 {
		t.Errorf("registered tablet servers %v, want [7] (8 has no client certificate)", ids)
	}
	if stranger.Registered() {
		t.Error("the tablet server without a client certificate registered")
	}
	stopStranger()
}
