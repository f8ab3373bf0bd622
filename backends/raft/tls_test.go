package raft

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "metaplane test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a voter certificate for 127.0.0.1 (server and client use)
// and its key to dir, returning the file paths.
func (ca *testCA) issue(t *testing.T, dir, name string, serial int64) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	write := func(p string, b []byte) {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	write(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	return certFile, keyFile
}

// TestMutualTLSThreeVoters: three voters talking mutual TLS with
// certificates from one CA elect a leader and replicate; a voter whose
// certificate comes from another CA cannot take part.
func TestMutualTLSThreeVoters(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	rogue := newTestCA(t)
	c := startCluster(t, 3, func(i int, o *Options) {
		o.TLS, o.CAFile = true, caFile
		if i == 2 {
			// Voter 3's certificate is signed by a CA the others do not trust.
			o.CertFile, o.KeyFile = rogue.issue(t, dir, fmt.Sprintf("voter%d", i+1), int64(i+2))
			return
		}
		o.CertFile, o.KeyFile = ca.issue(t, dir, fmt.Sprintf("voter%d", i+1), int64(i+2))
	})
	leader := c.waitLeader()
	if leader == 2 {
		t.Fatalf("the voter with an untrusted certificate became leader")
	}
	ctx := ctxT(t)
	cl := c.client(leader)
	if _, _, err := core.Create(ctx, cl, "/over-tls", []byte("x"), core.CreateOptions{}); err != nil {
		t.Fatalf("write over mutual TLS: %v", err)
	}
	other := c.client(1 - leader)
	n, err := core.Get(ctx, other, "/over-tls")
	if err != nil || string(n.Data) != "x" {
		t.Fatalf("read on the other trusted voter: %q %v", n.Data, err)
	}
	// The untrusted voter hears nothing from the leader: it knows no leader
	// and has not received the entry (the trusted voters exchanged many
	// heartbeats meanwhile).
	if st, err := c.members[2].Status(); err != nil || st.LeaderID != "" {
		t.Fatalf("the voter with an untrusted certificate knows leader %q (%v)", st.LeaderID, err)
	}
	v, err := c.members[2].m.nh.StaleRead(shardID, getManyQuery{paths: []string{"/over-tls"}})
	if err == nil && v.(*getManyAnswer).results[0].Err == nil {
		t.Fatalf("the voter with an untrusted certificate received the entry")
	}
}
