// Package tlsutil builds the crypto/tls configurations of metaplane's
// client listener and of its clients from PEM files, with certificates
// that are re-read when their files change, without a restart.
//
// It writes no cryptography: everything is crypto/tls and crypto/x509.
package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// MinVersion is the oldest TLS version served or spoken: TLS 1.2.
const MinVersion = tls.VersionTLS12

// ClientAuth maps the modes of security.tls.client-auth (none, request,
// required) to crypto/tls. Errors: an unknown mode.
func ClientAuth(mode string) (tls.ClientAuthType, error) {
	switch mode {
	case "", "none":
		return tls.NoClientCert, nil
	case "request":
		return tls.VerifyClientCertIfGiven, nil
	case "required":
		return tls.RequireAndVerifyClientCert, nil
	}
	return 0, fmt.Errorf("tlsutil: unknown client-auth mode %q: want none, request or required", mode)
}

// Files are the PEM files of one TLS identity: a certificate (leaf first,
// then intermediates), its private key, and a CA bundle ("" when none).
type Files struct {
	CertFile, KeyFile, CAFile string
}

// Reloader holds the certificate and CA pool read from Files and reads them
// again when a file changes (its size, modification time or identity, as
// os.Stat sees them: a rename over it counts), which it checks at every TLS
// handshake, or when Reload is called (on SIGHUP). A failed re-read keeps
// the previous certificate and pool in service. It is safe for concurrent
// use.
type Reloader struct {
	files Files
	// OnReload, when set before first use, is called after every re-read
	// with its error (nil: the new files are in service).
	OnReload func(err error)

	mu     sync.Mutex
	cur    *material
	failed []os.FileInfo // stamps of the last failed re-read, not retried
}

type material struct {
	cert   *tls.Certificate // nil without CertFile
	pool   *x509.CertPool   // nil without CAFile
	stamps []os.FileInfo    // of CertFile, KeyFile, CAFile as read
}

// NewReloader reads files once. Errors: a file that cannot be read or
// parsed, or a key that does not match its certificate; the error names
// the file.
func NewReloader(files Files) (*Reloader, error) {
	if (files.CertFile == "") != (files.KeyFile == "") {
		return nil, errors.New("tlsutil: a certificate needs both its certificate file and its key file")
	}
	m, err := load(files, stat(files.paths()))
	if err != nil {
		return nil, err
	}
	return &Reloader{files: files, cur: m}, nil
}

func (f Files) paths() []string { return []string{f.CertFile, f.KeyFile, f.CAFile} }

func stat(paths []string) []os.FileInfo {
	out := make([]os.FileInfo, len(paths))
	for i, p := range paths {
		if p != "" {
			out[i], _ = os.Stat(p) // nil when unreadable: differs from any stamp
		}
	}
	return out
}

func sameStamps(a, b []os.FileInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		switch {
		case a[i] == nil && b[i] == nil:
		case a[i] == nil || b[i] == nil:
			return false
		case !os.SameFile(a[i], b[i]) || a[i].Size() != b[i].Size() || !a[i].ModTime().Equal(b[i].ModTime()):
			return false
		}
	}
	return true
}

// load reads f; stamps are the files' stamps taken before reading them.
func load(f Files, stamps []os.FileInfo) (*material, error) {
	m := &material{stamps: stamps}
	if f.CertFile != "" {
		c, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tlsutil: certificate %s with key %s: %w", f.CertFile, f.KeyFile, err)
		}
		m.cert = &c
	}
	if f.CAFile != "" {
		b, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tlsutil: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("tlsutil: CA file %s holds no PEM certificate", f.CAFile)
		}
		m.pool = pool
	}
	return m, nil
}

// Reload re-reads the files now. On error the previous certificate and pool
// stay in service and the error names the file.
func (r *Reloader) Reload() error {
	stamps := stat(r.files.paths())
	m, err := load(r.files, stamps)
	r.mu.Lock()
	if err == nil {
		r.cur, r.failed = m, nil
	} else {
		r.failed = stamps
	}
	r.mu.Unlock()
	if r.OnReload != nil {
		r.OnReload(err)
	}
	return err
}

// current returns what is in service, re-reading first when a file
// changed since it was read (a change that failed to load is not retried
// until the files change again).
func (r *Reloader) current() *material {
	now := stat(r.files.paths())
	r.mu.Lock()
	cur, failed := r.cur, r.failed
	r.mu.Unlock()
	if sameStamps(now, cur.stamps) || (failed != nil && sameStamps(now, failed)) {
		return cur
	}
	r.Reload()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// Certificate returns the certificate in service (nil without CertFile).
func (r *Reloader) Certificate() *tls.Certificate { return r.current().cert }

// ServerConfig returns the configuration of a TLS listener: TLS 1.2 or
// later, the Reloader's certificate, and client certificates verified
// against its CA pool as auth says. Each handshake gets the certificate
// and pool in service at that moment. Errors: no certificate, or client
// verification without a CA file.
func (r *Reloader) ServerConfig(auth tls.ClientAuthType) (*tls.Config, error) {
	if r.files.CertFile == "" {
		return nil, errors.New("tlsutil: a TLS listener needs a certificate and key")
	}
	if auth != tls.NoClientCert && r.files.CAFile == "" {
		return nil, errors.New("tlsutil: verifying client certificates needs a CA file")
	}
	return &tls.Config{
		MinVersion: MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.current()
			return &tls.Config{
				MinVersion:   MinVersion,
				Certificates: []tls.Certificate{*m.cert},
				ClientAuth:   auth,
				ClientCAs:    m.pool,
				NextProtos:   []string{"h2"},
			}, nil
		},
	}, nil
}

// ClientConfig returns the configuration of a client: TLS 1.2 or later,
// servers verified against files.CAFile (the system's roots when empty),
// and files.CertFile/KeyFile, when given, presented as the client
// certificate (re-read when they change). Errors: as NewReloader.
func ClientConfig(files Files) (*tls.Config, error) {
	r, err := NewReloader(files)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: MinVersion, RootCAs: r.cur.pool}
	if files.CertFile != "" {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return r.Certificate(), nil
		}
	}
	return cfg, nil
}
