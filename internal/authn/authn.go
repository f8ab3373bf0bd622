// Package authn finds who a gRPC call comes from, for every metaplane
// server that authenticates its callers (the coordinator's client listener
// and the tablet server's tablet service; docs/security.md): the username
// and password of a SASL_SSL listener, else the verified client
// certificate's common name, else User:ANONYMOUS.
package authn

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/metaplane/metaplane/config"
)

// Anonymous is the principal of a call that carries no identity (a
// plaintext listener, or TLS without a client certificate).
var Anonymous = config.Principal{Type: config.PrincipalUser, Name: "ANONYMOUS"}

// Passwords are the users of a SASL_SSL listener. Passwords are kept as
// SHA-256 digests and compared in constant time; Replace swaps the whole
// set at once (SIGHUP).
type Passwords struct {
	users atomic.Pointer[map[string][sha256.Size]byte]
}

// NewPasswords returns the users and passwords of users (username ->
// password, config.ReadCredentialsFile).
func NewPasswords(users map[string]string) *Passwords {
	p := &Passwords{}
	p.Replace(users)
	return p
}

// Replace puts users in place of the current set.
func (p *Passwords) Replace(users map[string]string) {
	m := make(map[string][sha256.Size]byte, len(users))
	for u, pw := range users {
		m[u] = sha256.Sum256([]byte(pw))
	}
	p.users.Store(&m)
}

// unknownUser is compared against when the username is not known, so an
// unknown user costs what a wrong password does.
var unknownUser = sha256.Sum256([]byte("metaplane: no such user"))

// Check reports whether password is username's.
func (p *Passwords) Check(username, password string) bool {
	want, known := (*p.users.Load())[username]
	if !known {
		want = unknownUser
	}
	got := sha256.Sum256([]byte(password))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1 && known
}

// principalKey carries the authenticated principal in a call's context.
type principalKey struct{}

// WithPrincipal returns ctx carrying p as the call's principal.
func WithPrincipal(ctx context.Context, p config.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalOf returns the principal the call of ctx was authenticated as,
// and false outside an authenticated call.
func PrincipalOf(ctx context.Context) (config.Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(config.Principal)
	return p, ok
}

// Authenticate finds who the call of ctx comes from: the username and
// password on a SASL_SSL listener (passwords not nil; required there),
// else the verified client certificate's common name, else Anonymous. It
// also returns the client's host (the IP address of the connection),
// which ACLs match. Errors wrap adminapi.ErrUnauthenticated. Never logs
// or returns a password.
func Authenticate(ctx context.Context, passwords *Passwords) (config.Principal, string, error) {
	var host string
	var cert *x509.Certificate
	if pr, ok := peer.FromContext(ctx); ok {
		if pr.Addr != nil {
			host = pr.Addr.String()
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h
			}
		}
		if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.PeerCertificates) > 0 {
			cert = ti.State.PeerCertificates[0]
		}
	}
	if passwords != nil {
		md, _ := metadata.FromIncomingContext(ctx)
		v := md.Get(adminapi.AuthorizationHeader)
		if len(v) == 0 {
			return config.Principal{}, host, fmt.Errorf("%w: this listener (SASL_SSL) needs a username and password with every call (metaplane admin --user and --password-file; docs/security.md)", adminapi.ErrUnauthenticated)
		}
		u, p, ok := adminapi.ParseBasic(v[0])
		if !ok || len(v) != 1 {
			return config.Principal{}, host, fmt.Errorf("%w: the %s metadata is not one \"Basic <base64 of username:password>\"", adminapi.ErrUnauthenticated, adminapi.AuthorizationHeader)
		}
		if !passwords.Check(u, p) {
			return config.Principal{}, host, fmt.Errorf("%w: wrong username or password", adminapi.ErrUnauthenticated)
		}
		return config.Principal{Type: config.PrincipalUser, Name: u}, host, nil
	}
	if cert != nil {
		if strings.TrimSpace(cert.Subject.CommonName) == "" {
			return config.Principal{}, host, fmt.Errorf("%w: the client certificate's subject (%s) has no common name (CN) to take the principal User:<CN> from", adminapi.ErrUnauthenticated, cert.Subject)
		}
		return config.Principal{Type: config.PrincipalUser, Name: cert.Subject.CommonName}, host, nil
	}
	return Anonymous, host, nil
}

// IsHealth reports whether method is of grpc.health.v1, which is served
// to everyone who gets through the listener's TLS (probes carry no
// password) and reveals only whether the server serves.
func IsHealth(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") }

// Contains reports whether p is one of ps.
func Contains(ps []config.Principal, p config.Principal) bool {
	for _, q := range ps {
		if strings.EqualFold(q.Type, p.Type) && q.Name == p.Name {
			return true
		}
	}
	return false
}
