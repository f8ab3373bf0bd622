package adminapi

import (
	"context"
	"encoding/base64"
	"strings"

	"google.golang.org/grpc/credentials"
)

// AuthorizationHeader is the gRPC metadata key that carries a call's
// username and password to a SASL_SSL listener: "Basic " and the base64
// of "username:password" (RFC 7617's form).
const AuthorizationHeader = "authorization"

// PasswordCredentials returns per-RPC credentials that send username and
// password with every call (in AuthorizationHeader). They require a secure
// transport: gRPC refuses to send them over a plaintext connection.
func PasswordCredentials(username, password string) credentials.PerRPCCredentials {
	return passwordCreds{v: "Basic " + base64.StdEncoding.EncodeToString([]byte(username+":"+password))}
}

type passwordCreds struct{ v string }

func (p passwordCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{AuthorizationHeader: p.v}, nil
}

func (passwordCreds) RequireTransportSecurity() bool { return true }

// ParseBasic decodes the value of AuthorizationHeader into the username
// and password; ok is false when it is not of that form.
func ParseBasic(v string) (username, password string, ok bool) {
	const prefix = "Basic "
	if len(v) < len(prefix) || !strings.EqualFold(v[:len(prefix)], prefix) {
		return "", "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v[len(prefix):]))
	if err != nil {
		return "", "", false
	}
	username, password, ok = strings.Cut(string(b), ":")
	return username, password, ok && username != ""
}
