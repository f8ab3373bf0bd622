package adminclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
)

// TLSError is the error of a call that failed because a TLS handshake with
// a coordinator failed for a reason that does not pass by itself: its
// certificate is not trusted or not for its name, it refused this client's
// certificate (or the lack of one), or it does not speak TLS. Do returns it
// at once instead of retrying until the deadline.
type TLSError struct {
	Address string // host:port of the coordinator
	Err     error  // the handshake's error
}

func (e *TLSError) Error() string {
	return fmt.Sprintf("TLS handshake with %s failed: %v (not retried: a certificate or TLS setting does not change by itself)", e.Address, e.Err)
}

func (e *TLSError) Unwrap() error { return e.Err }

// tlsFailures remembers, per address, the last TLS handshake failure that
// retrying cannot cure; a successful handshake clears it.
type tlsFailures struct {
	mu sync.Mutex
	m  map[string]error
}

func (f *tlsFailures) set(addr string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.m, addr)
		return
	}
	if f.m == nil {
		f.m = map[string]error{}
	}
	f.m[addr] = err
}

func (f *tlsFailures) get(addr string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[addr]
}

// permanentTLS reports whether a handshake error is one retrying cannot
// cure: a certificate the client cannot verify, a TLS alert from the server
// (it refused the client's certificate, or the lack of one), or a peer that
// does not speak TLS.
func permanentTLS(err error) bool {
	var (
		cve *tls.CertificateVerificationError
		ua  x509.UnknownAuthorityError
		ci  x509.CertificateInvalidError
		he  x509.HostnameError
		rhe tls.RecordHeaderError
		op  *net.OpError
	)
	return errors.As(err, &cve) || errors.As(err, &ua) || errors.As(err, &ci) || errors.As(err, &he) ||
		errors.As(err, &rhe) || (errors.As(err, &op) && op.Op == "remote error")
}

// recordingCreds are TLS credentials that record permanent handshake
// failures in fails, including an alert the server sends after the
// handshake (with TLS 1.3 a refused client certificate shows only at the
// first read).
type recordingCreds struct {
	credentials.TransportCredentials
	fails *tlsFailures
}

func (c *recordingCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		if permanentTLS(err) {
			c.fails.set(authority, err)
		}
		return nil, nil, err
	}
	c.fails.set(authority, nil)
	return &alertConn{Conn: conn, addr: authority, fails: c.fails}, info, nil
}

func (c *recordingCreds) Clone() credentials.TransportCredentials {
	return &recordingCreds{TransportCredentials: c.TransportCredentials.Clone(), fails: c.fails}
}

// alertConn records a TLS alert read from the server.
type alertConn struct {
	net.Conn
	addr  string
	fails *tlsFailures
}

func (c *alertConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	var op *net.OpError
	if err != nil && errors.As(err, &op) && op.Op == "remote error" {
		c.fails.set(c.addr, err)
	}
	return n, err
}
