package coordinator_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/harness"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/tlsutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// startTLSCoordinator serves a memory-backed coordinator on 127.0.0.1 with
// TLS from files and the given client authentication.
func startTLSCoordinator(t *testing.T, files tlsutil.Files, auth tls.ClientAuthType) *node {
	t.Helper()
	s := memory.NewStore(memory.StoreOptions{})
	t.Cleanup(func() { s.Close() })
	r, err := tlsutil.NewReloader(files)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.ServerConfig(auth)
	if err != nil {
		t.Fatal(err)
	}
	n := harness.StartCoordinator(t, s, coordinator.Options{
		Open:        func(ctx context.Context) (core.MetadataBackend, error) { return s.NewClient(core.ClientOptions{}), nil },
		Credentials: credentials.NewTLS(cfg),
	})
	testutil.WaitFor(t, 5*time.Second, "the TLS coordinator leads", n.Srv.IsLeader)
	return n
}

// tlsClient returns an admin client with TLS from files (nil: plaintext)
// that gives up after 3s of retries.
func tlsClient(t *testing.T, addr string, files *tlsutil.Files) *adminclient.Client {
	t.Helper()
	var opts adminclient.Options
	if files != nil {
		cfg, err := tlsutil.ClientConfig(*files)
		if err != nil {
			t.Fatal(err)
		}
		opts.TLS = cfg
	}
	c, err := adminclient.NewClientWithOptions([]string{addr}, opts)
	if err != nil {
		t.Fatal(err)
	}
	c.Timeout, c.RetryWait = 3*time.Second, 10*time.Millisecond // refusals end within 3s
	t.Cleanup(func() { c.Close() })
	return c
}

func createDatabase(c *adminclient.Client, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: name})
		return err
	})
}

func listDatabases(t *testing.T, c *adminclient.Client) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var names []string
	err := c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		r, err := a.ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
		names = r.GetNames()
		return err
	})
	if err != nil {
		t.Fatalf("list databases with the right client: %v", err)
	}
	return names
}

// TestTLSListenerRefusesWhoItShould: with client certificates required, a
// plaintext client, a client without a certificate, a client whose
// certificate another CA signed and a client that does not trust the
// server are all refused and change nothing; the right client works.
func TestTLSListenerRefusesWhoItShould(t *testing.T) {
	ca := testutil.NewCA(t, "ca")
	other := testutil.NewCA(t, "other")
	srv := ca.ServerCert(t, "coordinator")
	n := startTLSCoordinator(t, tlsutil.Files{CertFile: srv.CertFile, KeyFile: srv.KeyFile, CAFile: ca.CertFile}, tls.RequireAndVerifyClientCert)
	alice := ca.ClientCert(t, "alice")
	mallory := other.ClientCert(t, "mallory")
	right := &tlsutil.Files{CAFile: ca.CertFile, CertFile: alice.CertFile, KeyFile: alice.KeyFile}

	for _, tt := range []struct {
		name  string
		files *tlsutil.Files
	}{
		{"plaintext", nil},
		{"no-client-certificate", &tlsutil.Files{CAFile: ca.CertFile}},
		{"client-certificate-of-another-ca", &tlsutil.Files{CAFile: ca.CertFile, CertFile: mallory.CertFile, KeyFile: mallory.KeyFile}},
		{"server-not-trusted", &tlsutil.Files{CAFile: other.CertFile, CertFile: alice.CertFile, KeyFile: alice.KeyFile}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := createDatabase(tlsClient(t, n.Addr, tt.files), tt.name); err == nil {
				t.Fatal("create-database succeeded, want refused")
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
	good := tlsClient(t, n.Addr, right)
	if got := listDatabases(t, good); len(got) != 0 {
		t.Fatalf("databases %v after refused calls, want none", got)
	}
	if err := createDatabase(good, "shop"); err != nil {
		t.Fatalf("create-database with the right client: %v", err)
	}
	if got := listDatabases(t, good); len(got) != 1 || got[0] != "shop" {
		t.Errorf("databases %v, want [shop]", got)
	}
}

// TestTLSServerOnly: without client authentication a client that trusts
// the server's CA works with no certificate of its own; plaintext is still
// refused.
func TestTLSServerOnly(t *testing.T) {
	ca := testutil.NewCA(t, "ca")
	srv := ca.ServerCert(t, "coordinator")
	n := startTLSCoordinator(t, tlsutil.Files{CertFile: srv.CertFile, KeyFile: srv.KeyFile}, tls.NoClientCert)
	if err := createDatabase(tlsClient(t, n.Addr, nil), "plain"); err == nil {
		t.Fatal("plaintext create-database succeeded, want refused")
	}
	c := tlsClient(t, n.Addr, &tlsutil.Files{CAFile: ca.CertFile})
	if err := createDatabase(c, "shop"); err != nil {
		t.Fatal(err)
	}
	if got := listDatabases(t, c); len(got) != 1 || got[0] != "shop" {
		t.Errorf("databases %v, want [shop]", got)
	}
}

// TestTLSCertificateRotation: the coordinator serves a certificate written
// over its files to the next connection, without a restart, while a
// connection made before keeps working.
func TestTLSCertificateRotation(t *testing.T) {
	ca := testutil.NewCA(t, "ca")
	first := ca.ServerCert(t, "coordinator")
	n := startTLSCoordinator(t, tlsutil.Files{CertFile: first.CertFile, KeyFile: first.KeyFile}, tls.NoClientCert)

	served := func() string {
		t.Helper()
		cfg, err := tlsutil.ClientConfig(tlsutil.Files{CAFile: ca.CertFile})
		if err != nil {
			t.Fatal(err)
		}
		cfg.NextProtos = []string{"h2"}
		c, err := tls.Dial("tcp", n.Addr, cfg)
		if err != nil {
			t.Fatalf("TLS handshake: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := tlsClient(t, n.Addr, &tlsutil.Files{CAFile: ca.CertFile})
	if err := createDatabase(before, "one"); err != nil {
		t.Fatal(err)
	}
	if got := served(); got != first.Cert.SerialNumber.String() {
		t.Fatalf("serial %s, want the first certificate's %s", got, first.Cert.SerialNumber)
	}

	second := ca.ServerCert(t, "coordinator") // written over the same files
	if got := served(); got != second.Cert.SerialNumber.String() {
		t.Fatalf("after rotation: serial %s, want the new certificate's %s", got, second.Cert.SerialNumber)
	}
	after := tlsClient(t, n.Addr, &tlsutil.Files{CAFile: ca.CertFile})
	if err := createDatabase(after, "two"); err != nil {
		t.Fatalf("a new client after rotation: %v", err)
	}
	if got := listDatabases(t, before); len(got) != 2 {
		t.Errorf("the client from before the rotation sees %v, want two databases", got)
	}
}
