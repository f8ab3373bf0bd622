package coordinator

import (
	"context"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/internal/authn"
)

// Security is how the coordinator authenticates and authorizes the calls
// on its client listener (docs/security.md). The zero value is the
// unsecured listener: every call is let in, as User:ANONYMOUS or as the
// client certificate's User:<CN>, and nothing is checked.
type Security struct {
	// Passwords, when set, makes the listener SASL_SSL: every call must
	// carry a username and password that Passwords accepts
	// (adminapi.PasswordCredentials); the principal is
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
var Anonymous = authn.Anonymous

// Passwords are the users of a SASL_SSL listener (authn.Passwords: kept as
// SHA-256 digests, compared in constant time, replaced at once on SIGHUP).
type Passwords = authn.Passwords

// NewPasswords returns the users and passwords of users (username ->
// password, config.ReadCredentialsFile).
func NewPasswords(users map[string]string) *Passwords { return authn.NewPasswords(users) }

// PrincipalOf returns the principal the call of ctx was authenticated as,
// and false outside an authenticated call.
func PrincipalOf(ctx context.Context) (config.Principal, bool) { return authn.PrincipalOf(ctx) }

// authenticate finds who the call of ctx comes from (authn.Authenticate
// with the listener's passwords). Errors: UNAUTHENTICATED.
func (sec *Security) authenticate(ctx context.Context) (config.Principal, string, error) {
	return authn.Authenticate(ctx, sec.Passwords)
}

func isHealth(method string) bool { return authn.IsHealth(method) }

// unaryAuth authenticates and authorizes, as sec says, every unary call
// before its handler runs, so a refused call has no effect; on a list
// answer it drops what the principal may not see.
func (s *Server) unaryAuth(sec *Security) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return s.authorizeUnary(sec, ctx, req, info, handler)
	}
}

func (s *Server) authorizeUnary(sec *Security, ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !sec.active() || isHealth(info.FullMethod) {
		return handler(ctx, req)
	}
	p, host, err := sec.authenticate(ctx)
	if err != nil {
		return nil, adminapi.ToStatus(err)
	}
	ctx = authn.WithPrincipal(ctx, p)
	a, err := s.checkAccess(ctx, sec, p, host, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	resp, err := handler(ctx, req)
	if err == nil && a.filter != nil && sec.Authorize && !sec.isSuperUser(p) {
		if err := a.filter(s.decider(ctx, p, host), req, resp); err != nil {
			return nil, err
		}
	}
	return resp, err
}

// streamAuth is unaryAuth for streaming calls; their rows name a fixed
// resource (the request is not read yet).
func (s *Server) streamAuth(sec *Security) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return s.authorizeStream(sec, srv, ss, info, handler)
	}
}

func (s *Server) authorizeStream(sec *Security, srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !sec.active() || isHealth(info.FullMethod) {
		return handler(srv, ss)
	}
	ctx := ss.Context()
	p, host, err := sec.authenticate(ctx)
	if err != nil {
		return adminapi.ToStatus(err)
	}
	if _, err := s.checkAccess(ctx, sec, p, host, info.FullMethod, nil); err != nil {
		return err
	}
	return handler(srv, &principalStream{ServerStream: ss, ctx: authn.WithPrincipal(ctx, p)})
}

type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (p *principalStream) Context() context.Context { return p.ctx }
