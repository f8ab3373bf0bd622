package tlsutil

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
	"sync/atomic"
	"time"
)

// CA is a certificate authority for tests and benchmarks: it signs server
// and client certificates and writes everything as PEM files in its
// directory. It is not for production certificates.
type CA struct {
	// CertFile is the CA certificate (PEM).
	CertFile string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	dir      string
}

// CertFiles are the PEM files of an issued certificate.
type CertFiles struct {
	CertFile, KeyFile string
	// Cert is the parsed certificate.
	Cert *x509.Certificate
}

// CertOptions describe a certificate to issue.
type CertOptions struct {
	// CommonName is the subject's CN.
	CommonName string
	// IPs and DNSNames are the subject alternative names (a server
	// certificate for 127.0.0.1 has IPs 127.0.0.1).
	IPs      []net.IP
	DNSNames []string
	// Server and Client set the extended key usages.
	Server, Client bool
	// NotBefore and NotAfter default to an hour ago and a day from now.
	NotBefore, NotAfter time.Time
}

var serial atomic.Int64

// NewCA makes a CA named name whose files are written in dir (created
// when missing).
func NewCA(dir, name string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tlsutil: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: %w", err)
	}
	ca := &CA{CertFile: filepath.Join(dir, name+"-ca.pem"), cert: cert, key: key, dir: dir}
	if err := writePEM(ca.CertFile, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return ca, nil
}

// Issue signs a certificate for opts with a new key and writes it as
// <file>.pem and <file>-key.pem in the CA's directory (replacing them by a
// rename, as a certificate rotation would).
func (ca *CA) Issue(file string, opts CertOptions) (CertFiles, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return CertFiles{}, fmt.Errorf("tlsutil: %w", err)
	}
	if opts.NotBefore.IsZero() {
		opts.NotBefore = time.Now().Add(-time.Hour)
	}
	if opts.NotAfter.IsZero() {
		opts.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: opts.CommonName},
		NotBefore:    opts.NotBefore,
		NotAfter:     opts.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		IPAddresses:  opts.IPs,
		DNSNames:     opts.DNSNames,
	}
	if opts.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if opts.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return CertFiles{}, fmt.Errorf("tlsutil: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return CertFiles{}, fmt.Errorf("tlsutil: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return CertFiles{}, fmt.Errorf("tlsutil: %w", err)
	}
	f := CertFiles{CertFile: filepath.Join(ca.dir, file+".pem"), KeyFile: filepath.Join(ca.dir, file+"-key.pem"), Cert: cert}
	if err := writePEM(f.CertFile, "CERTIFICATE", der); err != nil {
		return f, err
	}
	return f, writePEM(f.KeyFile, "PRIVATE KEY", keyDER)
}

// writePEM writes one PEM block to path through a temporary file renamed
// over path.
func writePEM(path, typ string, der []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("tlsutil: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("tlsutil: %w", err)
	}
	return nil
}
