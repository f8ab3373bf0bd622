package coordinator

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/core/config"
)

// Security is how the coordinator authenticates and authorizes the calls
// on its client listener (docs/security.md). The zero value is the
// unsecured listener: every call is let in, as User:ANONYMOUS or as the
// client certificate's User:<CN>, and nothing is checked.
type Security struct {
	// Passwords, when set, makes the listener SASL_SSL: every call must
	// carry a username and password that Passwords accepts
	// (adminclient.PasswordCredentials); the principal is
	// User:<username>. Serve it over TLS only (the CLI's configuration
	// refuses SASL on a plaintext listener).
	Passwords *Passwords
	// Authorize, authorizer.enabled: check every admin and tablet-server
	// call against the stored ACLs (authz.go).
	Authorize bool
	// SuperUsers, super.users: principals allowed everything.
	SuperUsers []config.Principal
}

func (s Security) active() bool { return s.Passwords != nil || s.Authorize }

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

// PrincipalOf returns the principal the call of ctx was authenticated as,
// and false outside an authenticated call.
func PrincipalOf(ctx context.Context) (config.Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(config.Principal)
	return p, ok
}

// authenticate finds who the call of ctx comes from: the username and
// password on a SASL_SSL listener (required there), else the verified
// client certificate's common name, else Anonymous. It also returns the
// client's host (the IP address of the connection), which ACLs match.
// Errors: UNAUTHENTICATED. Never logs or returns a password.
func (s *Server) authenticate(ctx context.Context) (config.Principal, string, error) {
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
	if pw := s.opts.Security.Passwords; pw != nil {
		md, _ := metadata.FromIncomingContext(ctx)
		v := md.Get(adminclient.AuthorizationHeader)
		if len(v) == 0 {
			return config.Principal{}, host, fmt.Errorf("%w: this listener (SASL_SSL) needs a username and password with every call (metaplane admin --user and --password-file; docs/security.md)", adminclient.ErrUnauthenticated)
		}
		u, p, ok := adminclient.ParseBasic(v[0])
		if !ok || len(v) != 1 {
			return config.Principal{}, host, fmt.Errorf("%w: the %s metadata is not one \"Basic <base64 of username:password>\"", adminclient.ErrUnauthenticated, adminclient.AuthorizationHeader)
		}
		if !pw.Check(u, p) {
			return config.Principal{}, host, fmt.Errorf("%w: wrong username or password", adminclient.ErrUnauthenticated)
		}
		return config.Principal{Type: config.PrincipalUser, Name: u}, host, nil
	}
	if cert != nil {
		if strings.TrimSpace(cert.Subject.CommonName) == "" {
			return config.Principal{}, host, fmt.Errorf("%w: the client certificate's subject (%s) has no common name (CN) to take the principal User:<CN> from", adminclient.ErrUnauthenticated, cert.Subject)
		}
		return config.Principal{Type: config.PrincipalUser, Name: cert.Subject.CommonName}, host, nil
	}
	return Anonymous, host, nil
}

// isHealth reports whether method is of grpc.health.v1, which is served
// to everyone who gets through the listener's TLS (probes carry no
// password) and reveals only whether the coordinator serves.
func isHealth(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") }

// unaryAuth authenticates and authorizes every unary call before its
// handler runs, so a refused call has no effect; on a list answer it drops
// what the principal may not see.
func (s *Server) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !s.opts.Security.active() || isHealth(info.FullMethod) {
		return handler(ctx, req)
	}
	p, host, err := s.authenticate(ctx)
	if err != nil {
		return nil, adminclient.ToStatus(err)
	}
	ctx = context.WithValue(ctx, principalKey{}, p)
	a, err := s.checkAccess(ctx, p, host, info.FullMethod, req)
	if err != nil {
		return nil, s.mapErr(err)
	}
	resp, err := handler(ctx, req)
	if err == nil && a.filter != nil && s.opts.Security.Authorize && !s.isSuperUser(p) {
		if err := a.filter(s.decider(ctx, p, host), req, resp); err != nil {
			return nil, s.mapErr(err)
		}
	}
	return resp, err
}

// streamAuth is unaryAuth for streaming calls; their rows name a fixed
// resource (the request is not read yet).
func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !s.opts.Security.active() || isHealth(info.FullMethod) {
		return handler(srv, ss)
	}
	ctx := ss.Context()
	p, host, err := s.authenticate(ctx)
	if err != nil {
		return adminclient.ToStatus(err)
	}
	if _, err := s.checkAccess(ctx, p, host, info.FullMethod, nil); err != nil {
		return s.mapErr(err)
	}
	return handler(srv, &principalStream{ServerStream: ss, ctx: context.WithValue(ctx, principalKey{}, p)})
}

type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (p *principalStream) Context() context.Context { return p.ctx }
