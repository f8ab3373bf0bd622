package testutil

import (
	"net"
	"testing"

	"github.com/metaplane/metaplane/internal/tlsutil"
)

// CertFiles are the PEM files of an issued certificate.
type CertFiles = tlsutil.CertFiles

// CertOptions describe a certificate to issue.
type CertOptions = tlsutil.CertOptions

// CA is a certificate authority made for a test (tlsutil.CA whose errors
// fail the test): it signs server and client certificates and writes
// everything as PEM files under a test directory.
type CA struct {
	*tlsutil.CA
}

// NewCA returns a new CA named name whose files live in t.TempDir().
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := tlsutil.NewCA(t.TempDir(), name)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{ca}
}

// Issue signs a certificate for opts with a new key and writes it as
// <file>.pem and <file>-key.pem in the CA's directory (overwriting them).
func (ca *CA) Issue(t testing.TB, file string, opts CertOptions) CertFiles {
	t.Helper()
	f, err := ca.CA.Issue(file, opts)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// ServerCert issues a server certificate for 127.0.0.1 named file.
func (ca *CA) ServerCert(t testing.TB, file string) CertFiles {
	t.Helper()
	return ca.Issue(t, file, CertOptions{CommonName: file, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
}

// ClientCert issues a client certificate with common name cn.
func (ca *CA) ClientCert(t testing.TB, cn string) CertFiles {
	t.Helper()
	return ca.Issue(t, cn, CertOptions{CommonName: cn, Client: true})
}
