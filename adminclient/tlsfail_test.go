package adminclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

func pool(t *testing.T, ca *testutil.CA) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		t.Fatal("no CA certificate")
	}
	return p
}

// TestDoDoesNotRetryACertificateFailure: a TLS handshake that cannot
// succeed (the server's certificate is not trusted; the server refuses the
// client without a certificate) ends a read and a write at once with a
// *TLSError naming the coordinator, instead of being retried until the
// deadline; nothing reaches the server.
func TestDoDoesNotRetryACertificateFailure(t *testing.T) {
	ca, other := testutil.NewCA(t, "ca"), testutil.NewCA(t, "other")
	srv := ca.ServerCert(t, "server")
	cert, err := tls.LoadX509KeyPair(srv.CertFile, srv.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAdmin{writes: []error{nil}, reads: []error{nil}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool(t, ca), MinVersion: tls.VersionTLS12})))
	adminv1.RegisterAdminServiceServer(s, f)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	addr := l.Addr().String()

	for _, tt := range []struct {
		name string
		cfg  *tls.Config
		want string
	}{
		{"server not trusted", &tls.Config{RootCAs: pool(t, other)}, "certificate"},
		{"no client certificate", &tls.Config{RootCAs: pool(t, ca)}, "remote error"},
	} {
		c, err := NewClientWithOptions([]string{addr}, Options{TLS: tt.cfg})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, call := range []struct {
			kind string
			do   func(ctx context.Context, a adminv1.AdminServiceClient) error
		}{
			{"write", func(ctx context.Context, a adminv1.AdminServiceClient) error {
				_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "x"})
				return err
			}},
			{"read", func(ctx context.Context, a adminv1.AdminServiceClient) error {
				_, err := a.ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
				return err
			}},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := c.Admin(ctx, call.do)
			ended := ctx.Err()
			cancel()
			te, ok := errors.AsType[*TLSError](err)
			if !ok || te.Address != addr || !strings.Contains(err.Error(), tt.want) || ended != nil {
				t.Errorf("%s, %s: %v (context %v); want a *TLSError for %s saying %q before the deadline", tt.name, call.kind, err, ended, addr, tt.want)
			}
		}
	}
	if n, r := f.nWrite.Load(), f.nRead.Load(); n != 0 || r != 0 {
		t.Fatalf("the server served %d writes and %d reads over refused handshakes", n, r)
	}
}
