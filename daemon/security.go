package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/internal/authn"
	"github.com/metaplane/metaplane/internal/tlsutil"
	"github.com/metaplane/metaplane/tabletserver"
	"google.golang.org/grpc/credentials"
)

// clientListenerSecurity is what the coordinator's CLIENT listener serves:
// its credentials (nil: plaintext), the reloader of its certificate (nil:
// plaintext) and a description for the banner.
type clientListenerSecurity struct {
	creds    credentials.TransportCredentials
	reloader *tlsutil.Reloader
	banner   string
	// auth is what the coordinator checks of every call (passwords,
	// authorizer); reload re-reads the credentials file (SIGHUP).
	auth   coordinator.Security
	reload func()
}

// clientAuthWords describe security.tls.client-auth in the banner.
var clientAuthWords = map[string]string{
	"none":     "TLS, no client certificates asked for",
	"request":  "TLS, client certificates verified when given",
	"required": "TLS, client certificates required (mutual TLS)",
}

// listenerSecurity builds the CLIENT listener's TLS from the configuration
// (security.protocol.map, security.tls.*), logging certificate reloads.
func listenerSecurity(cfg *config.Config, logger *slog.Logger) (clientListenerSecurity, error) {
	sec, err := listenerTLS(cfg, logger)
	if err != nil {
		return sec, err
	}
	return withAuth(cfg, logger, sec)
}

// listenerTLS is listenerSecurity's TLS part.
func listenerTLS(cfg *config.Config, logger *slog.Logger) (clientListenerSecurity, error) {
	if p := cfg.ListenerProtocol(clientListenerName(cfg)); p != config.ProtocolSSL && p != config.ProtocolSASLSSL {
		return clientListenerSecurity{banner: "plaintext, unauthenticated: anyone who can reach this port can change the catalog (see docs/security.md)"}, nil
	}
	t := cfg.Security.TLS
	auth, err := tlsutil.ClientAuth(t.ClientAuth)
	if err != nil {
		return clientListenerSecurity{}, fmt.Errorf("security.tls.client-auth: %w", err)
	}
	r, err := tlsutil.NewReloader(tlsutil.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile})
	if err != nil {
		return clientListenerSecurity{}, fmt.Errorf("security.tls.*: %w", err)
	}
	r.OnReload = func(err error) {
		if err != nil {
			logger.Error("TLS files changed but cannot be used; the previous certificate stays in service", "err", err)
			return
		}
		logger.Info("TLS certificate reloaded", "cert-file", t.CertFile, "ca-file", t.CAFile)
	}
	tc, err := r.ServerConfig(auth)
	if err != nil {
		return clientListenerSecurity{}, fmt.Errorf("security.tls.*: %w", err)
	}
	return clientListenerSecurity{creds: credentials.NewTLS(tc), reloader: r, banner: clientAuthWords[t.ClientAuth]}, nil
}

// coordinatorClientTLS is the TLS a process that dials the coordinators
// (a tablet server) uses by its configuration: nil when their CLIENT
// listener is PLAINTEXT, else security.tls.ca-file to verify them and
// security.tls.cert-file/key-file as its client certificate.
func coordinatorClientTLS(cfg *config.Config) (*tls.Config, error) {
	if p := cfg.ListenerProtocol(clientListenerName(cfg)); p != config.ProtocolSSL && p != config.ProtocolSASLSSL {
		return nil, nil
	}
	t := cfg.Security.TLS
	c, err := tlsutil.ClientConfig(tlsutil.Files{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile})
	if err != nil {
		return nil, fmt.Errorf("security.tls.*: %w", err)
	}
	return c, nil
}

// withAuth adds to sec the authentication and authorization of the
// configuration: the users of security.sasl.plain.credentials-file on a
// SASL_SSL CLIENT listener (re-read by sec.reload), authorizer.enabled
// and super.users; and says so in the banner.
func withAuth(cfg *config.Config, logger *slog.Logger, sec clientListenerSecurity) (clientListenerSecurity, error) {
	if cfg.ListenerProtocol(clientListenerName(cfg)) == config.ProtocolSASLSSL {
		file := cfg.Security.SASL.PlainCredentialsFile
		users, err := config.ReadCredentialsFile(file)
		if err != nil {
			return sec, fmt.Errorf("security.sasl.plain.credentials-file: %w", err)
		}
		pw := coordinator.NewPasswords(users)
		sec.auth.Passwords = pw
		sec.reload = reloadCredentials(file, pw, logger)
		sec.banner += ", then a username and password with every call (SASL PLAIN)"
	}
	sec.auth.Authorize = cfg.Authorizer.Enabled
	sec.auth.SuperUsers = cfg.SuperUserList()
	if sec.auth.Authorize {
		if sec.creds == nil {
			// Not "anyone can change the catalog": the ACLs decide what
			// the anonymous principal may do.
			sec.banner = "plaintext, unauthenticated: every call is User:ANONYMOUS"
		}
		names := make([]string, len(sec.auth.SuperUsers))
		for i, p := range sec.auth.SuperUsers {
			names[i] = p.String()
		}
		su := "no super users"
		if len(names) > 0 {
			su = "super users " + strings.Join(names, ", ")
		}
		sec.banner += "; authorizer on: every call checked against the stored ACLs (" + su + ")"
	} else if sec.creds != nil {
		sec.banner += "; authorizer off: every client let in may do everything"
	}
	return sec, nil
}

// coordinatorClientPassword is the username and password a tablet server
// presents to the coordinators (client.security.sasl.*), or "" when the
// configuration gives none.
func coordinatorClientPassword(cfg *config.Config) (string, string, error) {
	cs := cfg.ClientSASL
	if cs.Username == "" {
		return "", "", nil
	}
	pw, err := config.ReadPasswordFile(cs.PasswordFile)
	if err != nil {
		return "", "", fmt.Errorf("client.security.sasl.password-file: %w", err)
	}
	return cs.Username, pw, nil
}

// reloadCredentials returns what SIGHUP does to a credentials file's
// users: read file again and replace pw's users with it, or, when the file
// cannot be used, keep the previous users and log why.
func reloadCredentials(file string, pw *authn.Passwords, logger *slog.Logger) func() {
	return func() {
		users, err := config.ReadCredentialsFile(file)
		if err != nil {
			logger.Error("credentials file cannot be used; the previous users stay in service", "file", file, "err", err)
			return
		}
		pw.Replace(users)
		logger.Info("credentials file reloaded", "file", file, "users", len(users))
	}
}

// onSIGHUP calls reload at every SIGHUP until ctx ends.
func onSIGHUP(ctx context.Context, reload func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload()
			}
		}
	}()
}

// reloadAll is what SIGHUP does to sec: re-read the TLS files (the
// reloader logs the outcome) and the credentials file.
func (sec clientListenerSecurity) reloadAll() {
	if sec.reloader != nil {
		sec.reloader.Reload()
	}
	if sec.reload != nil {
		sec.reload()
	}
}

// tabletServiceSecurity is what a tablet server's tablet service serves
// (the listener the coordinator leader calls): TLS as the client
// listener's security.protocol.map entry says, with security.tls.* as for
// a coordinator (security.tls.cert-file is then its server certificate
// too); on SASL_SSL the users of security.sasl.plain.credentials-file when
// it is given; and with authorizer.enabled only super.users let in. It
// returns the credentials (nil: plaintext), the checks and a description.
func tabletServiceSecurity(cfg *config.Config, logger *slog.Logger) (credentials.TransportCredentials, tabletserver.Security, string, func(), error) {
	sec, err := listenerTLS(cfg, logger)
	if err != nil {
		return nil, tabletserver.Security{}, "", nil, err
	}
	if sec.creds == nil {
		sec.banner = "plaintext"
	}
	ts := tabletserver.Security{Authorize: cfg.Authorizer.Enabled, Allowed: cfg.SuperUserList()}
	if file := cfg.Security.SASL.PlainCredentialsFile; file != "" && cfg.ListenerProtocol(clientListenerName(cfg)) == config.ProtocolSASLSSL {
		users, err := config.ReadCredentialsFile(file)
		if err != nil {
			return nil, ts, "", nil, fmt.Errorf("security.sasl.plain.credentials-file: %w", err)
		}
		ts.Passwords = authn.NewPasswords(users)
		sec.reload = reloadCredentials(file, ts.Passwords, logger)
		sec.banner += ", then a username and password with every call (SASL PLAIN)"
	}
	if ts.Authorize {
		names := make([]string, len(ts.Allowed))
		for i, p := range ts.Allowed {
			names[i] = p.String()
		}
		if len(names) == 0 {
			names = []string{"none"}
		}
		sec.banner += "; authorizer on: only super.users may call it (" + strings.Join(names, ", ") + ")"
	}
	return sec.creds, ts, sec.banner, sec.reloadAll, nil
}
