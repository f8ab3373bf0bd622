package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/internal/tlsutil"
)

// tlsFlags are the client TLS flags of `metaplane admin`. A flag not given
// on the command line falls back to its environment variable
// (METAPLANE_ADMIN_TLS_CA, _CERT, _KEY).
type tlsFlags struct {
	fs            *pflag.FlagSet
	ca, cert, key string
	// user and passwordFile are --user and --password-file: the username
	// and password of a SASL_SSL listener (they imply TLS).
	user, passwordFile string

	once      sync.Once
	diagnosis string
}

var tlsFlagEnv = map[string]string{
	"tls-ca":        "METAPLANE_ADMIN_TLS_CA",
	"tls-cert":      "METAPLANE_ADMIN_TLS_CERT",
	"tls-key":       "METAPLANE_ADMIN_TLS_KEY",
	"user":          "METAPLANE_ADMIN_USER",
	"password-file": "METAPLANE_ADMIN_PASSWORD_FILE",
}

// addTLSFlags defines --tls-ca, --tls-cert and --tls-key on fs.
func addTLSFlags(fs *pflag.FlagSet) *tlsFlags {
	f := &tlsFlags{fs: fs}
	fs.StringVar(&f.ca, "tls-ca", "", "speak TLS, verifying the coordinators against this CA `file` (PEM); env METAPLANE_ADMIN_TLS_CA")
	fs.StringVar(&f.cert, "tls-cert", "", "speak TLS, presenting this client certificate `file` (PEM; with --tls-key); env METAPLANE_ADMIN_TLS_CERT")
	fs.StringVar(&f.key, "tls-key", "", "the private key `file` (PEM) of --tls-cert; env METAPLANE_ADMIN_TLS_KEY")
	fs.StringVar(&f.user, "user", "", "authenticate as this `username` (SASL_SSL listener; with --password-file; implies TLS); env METAPLANE_ADMIN_USER")
	fs.StringVar(&f.passwordFile, "password-file", "", "the `file` whose first line is the password of --user; env METAPLANE_ADMIN_PASSWORD_FILE")
	for n := range tlsFlagEnv {
		if n != "user" {
			_ = fs.SetAnnotation(n, cobra.BashCompFilenameExt, []string{}) // complete file names
		}
	}
	return f
}

// value returns a flag's value, or its environment variable's when the
// flag was not given.
func (f *tlsFlags) value(name string, v string) string {
	if fl := f.fs.Lookup(name); fl != nil && fl.Changed {
		return v
	}
	return os.Getenv(tlsFlagEnv[name])
}

// config returns the client TLS configuration the flags ask for, or nil
// (plaintext) when none is given. Errors: usage errors naming the flag.
func (f *tlsFlags) config() (*tls.Config, error) {
	ca, cert, key := f.value("tls-ca", f.ca), f.value("tls-cert", f.cert), f.value("tls-key", f.key)
	if ca == "" && cert == "" && key == "" && f.value("user", f.user) == "" {
		return nil, nil
	}
	if (cert == "") != (key == "") {
		return nil, UsageError("--tls-cert and --tls-key go together: give both or neither")
	}
	cfg, err := tlsutil.ClientConfig(tlsutil.Files{CAFile: ca, CertFile: cert, KeyFile: key})
	if err != nil {
		return nil, UsageError("--tls-ca/--tls-cert/--tls-key: %v", err)
	}
	return cfg, nil
}

// password returns --user and the password of --password-file ("", ""
// without --user). Errors: usage errors naming the flag.
func (f *tlsFlags) password() (string, string, error) {
	user, file := f.value("user", f.user), f.value("password-file", f.passwordFile)
	switch {
	case user == "" && file == "":
		return "", "", nil
	case user == "":
		return "", "", UsageError("--password-file needs --user")
	case file == "":
		return "", "", UsageError("--user needs --password-file (a file whose first line is the password)")
	}
	pw, err := config.ReadPasswordFile(file)
	if err != nil {
		return "", "", UsageError("--password-file: %v", err)
	}
	return user, pw, nil
}

// client returns an admin client of the bootstrap servers, over TLS when
// the TLS flags ask for it, with the password of --user when given.
func (a *admin) client() (*adminclient.Client, error) { return a.tls.adminClient(a.bootstrap) }

// credentials returns the TLS configuration (nil: plaintext) and the
// username and password the flags ask for.
func (f *tlsFlags) credentials() (*tls.Config, string, string, error) {
	cfg, err := f.config()
	if err != nil {
		return nil, "", "", err
	}
	user, pw, err := f.password()
	return cfg, user, pw, err
}

// adminClient returns an admin client of bootstrap (--bootstrap-servers)
// with what the flags ask for. Errors: usage errors naming the flag.
func (f *tlsFlags) adminClient(bootstrap string) (*adminclient.Client, error) {
	cfg, user, pw, err := f.credentials()
	if err != nil {
		return nil, err
	}
	c, err := adminclient.NewClientWithOptions(SplitList(bootstrap), adminclient.Options{TLS: cfg, Username: user, Password: pw})
	if err != nil {
		return nil, UsageError("--bootstrap-servers: %v", err)
	}
	return c, nil
}

// dial opens a gRPC connection to one coordinator with what the flags ask
// for. Errors: usage errors naming the flag.
func (f *tlsFlags) dial(addr string) (*grpc.ClientConn, error) {
	cfg, user, pw, err := f.credentials()
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if cfg != nil {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	}
	if user != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(adminapi.PasswordCredentials(user, pw)))
	}
	cc, err := grpc.NewClient(adminapi.HostPort(addr), opts...)
	if err != nil {
		return nil, UsageError("--bootstrap-servers: %s: %v", addr, err)
	}
	return cc, nil
}

// diagnoseTLS explains, after no coordinator answered, a failure that comes
// from TLS: it opens one connection to each bootstrap address and reports
// the first that speaks TLS while the flags ask for plaintext, does not
// speak TLS while they ask for it, fails the handshake, or refuses the
// client certificate. It returns "" when it finds no such cause. The
// outcome is cached: do calls it twice.
func (a *admin) diagnoseTLS() string {
	a.tls.once.Do(func() { a.tls.diagnosis = a.tls.diagnose(SplitList(a.bootstrap)) })
	return a.tls.diagnosis
}

func (f *tlsFlags) diagnose(bootstrap []string) string {
	cfg, err := f.config()
	if err != nil {
		return ""
	}
	d := &net.Dialer{Timeout: 2 * time.Second}
	for _, b := range bootstrap {
		addr := adminapi.HostPort(b)
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			continue
		}
		if cfg == nil {
			// Only to learn whether the port speaks TLS: nothing is sent
			// over the connection, so its certificate need not be trusted.
			c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tlsutil.MinVersion})
			if err == nil {
				c.Close()
				return fmt.Sprintf("%s speaks TLS and this client does not: give --tls-ca (and --tls-cert and --tls-key when it requires client certificates; docs/security.md)", addr)
			}
			continue
		}
		c := cfg.Clone()
		c.ServerName, c.NextProtos = host, []string{"h2"}
		conn, err := tls.DialWithDialer(d, "tcp", addr, c)
		var rhe tls.RecordHeaderError
		var op *net.OpError
		switch {
		case errors.As(err, &rhe):
			return fmt.Sprintf("%s does not speak TLS (plaintext listener?): drop --tls-ca, --tls-cert and --tls-key", addr)
		case errors.As(err, &op) && op.Op == "dial":
			continue // unreachable: nothing TLS can say
		case err != nil:
			return fmt.Sprintf("TLS handshake with %s failed: %v", addr, err)
		}
		// With TLS 1.3 a refused client certificate shows at the first read.
		conn.SetReadDeadline(time.Now().Add(time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) && strings.Contains(err.Error(), "tls:") {
			return fmt.Sprintf("%s refused this client over TLS: %v", addr, err)
		}
	}
	return ""
}
