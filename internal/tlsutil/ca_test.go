package tlsutil

import (
	"crypto/x509"
	"net"
	"testing"
)

// testCA is a CA whose errors fail the test (internal/testutil's CA
// imports this package, so its tests cannot use that one).
type testCA struct{ *CA }

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	ca, err := NewCA(t.TempDir(), name)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{ca}
}

func (ca testCA) issue(t *testing.T, file string, opts CertOptions) CertFiles {
	t.Helper()
	f, err := ca.Issue(file, opts)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (ca testCA) ServerCert(t *testing.T, file string) CertFiles {
	t.Helper()
	return ca.issue(t, file, CertOptions{CommonName: file, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
}

func (ca testCA) ClientCert(t *testing.T, cn string) CertFiles {
	t.Helper()
	return ca.issue(t, cn, CertOptions{CommonName: cn, Client: true})
}

// TestIssueWritesAVerifiableChain: an issued certificate verifies against
// its CA for its usage, and not against another CA.
func TestIssueWritesAVerifiableChain(t *testing.T) {
	ca, other := newTestCA(t, "ca"), newTestCA(t, "other")
	srv := ca.ServerCert(t, "server")
	for _, c := range []struct {
		root *CA
		ok   bool
	}{{ca.CA, true}, {other.CA, false}} {
		pool := x509NewPool(c.root)
		_, err := srv.Cert.Verify(x509VerifyOptions(pool))
		if (err == nil) != c.ok {
			t.Errorf("verify against %s: %v, want ok=%v", c.root.CertFile, err, c.ok)
		}
	}
}

func x509NewPool(ca *CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

func x509VerifyOptions(pool *x509.CertPool) x509.VerifyOptions {
	return x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
}
