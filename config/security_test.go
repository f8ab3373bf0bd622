package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metaplane/metaplane/internal/testutil"
)

// TestSecurityValidation: the combinations of security.protocol.map and
// security.tls.* that Validate refuses, each naming its key.
func TestSecurityValidation(t *testing.T) {
	for _, tt := range []struct {
		name      string
		overrides []string
		key, frag string
	}{
		{"ssl needs a certificate", []string{"security.protocol.map=CLIENT:SSL"},
			"security.tls.cert-file", "required when security.protocol.map maps a listener to SSL or SASL_SSL (CLIENT:SSL)"},
		{"ssl needs a key", []string{"security.protocol.map=CLIENT:SSL", "security.tls.cert-file=/c.pem"},
			"security.tls.key-file", "required when security.protocol.map maps a listener to SSL"},
		{"unknown listener", []string{"security.protocol.map=INTERNAL:SSL"},
			"security.protocol.map", "listener INTERNAL is not one of bind.listeners' names"},
		{"unknown protocol", []string{"security.protocol.map=CLIENT:TLS"},
			"security.protocol.map", "unknown protocol TLS: want one of PLAINTEXT, SSL"},
		{"plain on a plaintext listener", []string{"security.protocol.map=CLIENT:SASL"},
			"security.protocol.map", `"CLIENT:SASL": SASL on a plaintext listener would send the passwords of security.sasl.enabled.mechanisms (PLAIN) in the clear; map the listener to SASL_SSL`},
		{"plain on SASL_PLAINTEXT", []string{"security.protocol.map=CLIENT:SASL_PLAINTEXT"},
			"security.protocol.map", "map the listener to SASL_SSL"},
		{"sasl_ssl needs a credentials file", []string{"security.protocol.map=CLIENT:SASL_SSL", "security.tls.cert-file=/c", "security.tls.key-file=/k"},
			"security.sasl.plain.credentials-file", "required when security.protocol.map maps a listener to SASL_SSL (CLIENT:SASL_SSL)"},
		{"sasl_ssl needs PLAIN", []string{"security.protocol.map=CLIENT:SASL_SSL", "security.tls.cert-file=/c", "security.tls.key-file=/k", "security.sasl.plain.credentials-file=/u", "security.sasl.enabled.mechanisms="},
			"security.sasl.enabled.mechanisms", "must include PLAIN when security.protocol.map maps a listener to SASL_SSL"},
		{"unknown mechanism", []string{"security.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256"},
			"security.sasl.enabled.mechanisms", `unknown mechanism "SCRAM-SHA-256": want PLAIN`},
		{"super user without a type", []string{"super.users=User:admin;ops"},
			"super.users", `"ops": want TYPE:name, e.g. User:admin`},
		{"super user of another type", []string{"super.users=Group:ops"},
			"super.users", `unknown principal type "Group": want User`},
		{"client username without a password", []string{"client.security.sasl.username=ts1"},
			"client.security.sasl.password-file", "required with client.security.sasl.username"},
		{"malformed entry", []string{"security.protocol.map=CLIENT"},
			"security.protocol.map", `"CLIENT": want LISTENER:PROTOCOL`},
		{"listener twice", []string{"security.protocol.map=CLIENT:SSL,client:PLAINTEXT", "security.tls.cert-file=/c", "security.tls.key-file=/k"},
			"security.protocol.map", "listener client is given twice"},
		{"unknown client auth", []string{"security.tls.client-auth=yes"},
			"security.tls.client-auth", `unknown mode "yes": want one of none, request, required`},
		{"client auth needs a CA", []string{"security.tls.client-auth=required"},
			"security.tls.ca-file", "required when security.tls.client-auth is required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(LoadOptions{Overrides: tt.overrides})
			wantProblem(t, err, tt.key, tt.frag)
		})
	}
}

// TestTabletServerNeedsItsCertificate: a tablet server whose client
// listener is SSL serves its tablet service on TLS, so it needs a
// certificate and key as a coordinator does.
func TestTabletServerNeedsItsCertificate(t *testing.T) {
	_, err := Load(LoadOptions{Observer: true, Overrides: []string{"tablet-server.id=1", "coordinator.seed.nodes=127.0.0.1:9123", "security.protocol.map=CLIENT:SSL"}})
	wantProblem(t, err, "security.tls.cert-file", "required when security.protocol.map maps a listener to SSL or SASL_SSL (CLIENT:SSL)")
}

// TestListenerProtocol: the map is read case-insensitively, and a listener
// it does not name is PLAINTEXT.
func TestListenerProtocol(t *testing.T) {
	ca := testutil.NewCA(t, "ca")
	srv := ca.ServerCert(t, "server")
	cfg, err := Load(LoadOptions{Overrides: []string{
		"bind.listeners=CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
		"security.protocol.map=client:ssl, INTERNAL:PLAINTEXT",
		"security.tls.cert-file=" + srv.CertFile, "security.tls.key-file=" + srv.KeyFile,
		"security.tls.ca-file=" + ca.CertFile, "security.tls.client-auth=required",
	}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"CLIENT": ProtocolSSL, "internal": ProtocolPlaintext, "OTHER": ProtocolPlaintext} {
		if got := cfg.ListenerProtocol(name); got != want {
			t.Errorf("ListenerProtocol(%s) = %s, want %s", name, got, want)
		}
	}
	if Default().ListenerProtocol("CLIENT") != ProtocolPlaintext || Default().Security.TLS.ClientAuth != "none" {
		t.Errorf("defaults: CLIENT %s, client-auth %q; want PLAINTEXT and none", Default().ListenerProtocol("CLIENT"), Default().Security.TLS.ClientAuth)
	}
}

// TestCheckFilesParsesPEM: CheckFiles (and so Load and `config validate`)
// refuses a garbage certificate, a key that is not a key, a key of another
// certificate, an expired certificate and a certificate not valid yet,
// each under its own key, and accepts a good set.
func TestCheckFilesParsesPEM(t *testing.T) {
	ca := testutil.NewCA(t, "ca")
	good := ca.ServerCert(t, "good")
	other := ca.ServerCert(t, "other")
	expired := ca.Issue(t, "expired", testutil.CertOptions{CommonName: "expired", Server: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	future := ca.Issue(t, "future", testutil.CertOptions{CommonName: "future", Server: true,
		NotBefore: time.Now().Add(24 * time.Hour), NotAfter: time.Now().Add(48 * time.Hour)})
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(t.TempDir(), "text.pem")
	if err := os.WriteFile(text, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ssl := []string{"security.protocol.map=CLIENT:SSL"}
	for _, tt := range []struct {
		name      string
		overrides []string
		key, frag string
	}{
		{"garbage certificate", []string{"security.tls.cert-file=" + garbage, "security.tls.key-file=" + good.KeyFile},
			"security.tls.cert-file", "PEM block 1 is not a valid certificate"},
		{"not PEM at all", []string{"security.tls.cert-file=" + text, "security.tls.key-file=" + good.KeyFile},
			"security.tls.cert-file", "holds no PEM certificate"},
		{"key is not a key", []string{"security.tls.cert-file=" + good.CertFile, "security.tls.key-file=" + good.CertFile},
			"security.tls.key-file", "holds no PEM private key"},
		{"mismatched key", []string{"security.tls.cert-file=" + good.CertFile, "security.tls.key-file=" + other.KeyFile},
			"security.tls.key-file", "does not match the certificate in security.tls.cert-file"},
		{"expired certificate", []string{"security.tls.cert-file=" + expired.CertFile, "security.tls.key-file=" + expired.KeyFile},
			"security.tls.cert-file", "certificate CN=expired expired on"},
		{"not valid yet", []string{"security.tls.cert-file=" + future.CertFile, "security.tls.key-file=" + future.KeyFile},
			"security.tls.cert-file", "certificate CN=future is not valid before"},
		{"garbage CA", []string{"security.tls.cert-file=" + good.CertFile, "security.tls.key-file=" + good.KeyFile, "security.tls.ca-file=" + text},
			"security.tls.ca-file", "holds no PEM CA certificate"},
		{"missing CA", []string{"security.tls.cert-file=" + good.CertFile, "security.tls.key-file=" + good.KeyFile, "security.tls.ca-file=/nonexistent/ca.pem"},
			"security.tls.ca-file", "cannot read /nonexistent/ca.pem"},
		{"raft TLS files are parsed too", []string{"coordinator.raft.tls.enabled=true", "coordinator.raft.tls.ca-file=" + ca.CertFile,
			"coordinator.raft.tls.cert-file=" + good.CertFile, "coordinator.raft.tls.key-file=" + other.KeyFile},
			"coordinator.raft.tls.key-file", "does not match the certificate in coordinator.raft.tls.cert-file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(LoadOptions{Overrides: append(append([]string(nil), ssl...), tt.overrides...)})
			wantProblem(t, err, tt.key, tt.frag)
			for _, p := range problemsOf(t, err) {
				if !strings.HasPrefix(p.Key, "security.tls.") && !strings.HasPrefix(p.Key, "coordinator.raft.tls.") {
					t.Errorf("unexpected problem %v", p)
				}
			}
		})
	}
	cfg, err := Load(LoadOptions{Overrides: append(ssl, "security.tls.cert-file="+good.CertFile, "security.tls.key-file="+good.KeyFile,
		"security.tls.ca-file="+ca.CertFile, "security.tls.client-auth=required")})
	if err != nil {
		t.Fatalf("a good set of files: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate of the loaded config: %v", err)
	}
}

// TestCredentialsFile: the format of security.sasl.plain.credentials-file,
// and that CheckFiles reports a bad file under its key without printing a
// password.
func TestCredentialsFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("users", "# operators\nadmin:s3cret: with colon \r\n\nts-1:pw1\n", 0o600)
	users, err := ReadCredentialsFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(users) != 2 || users["admin"] != "s3cret: with colon " || users["ts-1"] != "pw1" {
		t.Errorf("users = %q", users)
	}
	for _, tt := range []struct{ body, frag string }{
		{"admin\n", "line 1: want username:password"},
		{"admin:topsecret\nadmin:other\n", "line 2: user admin is given twice"},
		{"bob:\n", "line 1: user bob has an empty password"},
		{"# nothing\n", "lists no user"},
	} {
		p := write("bad", tt.body, 0o600)
		_, err := ReadCredentialsFile(p)
		if err == nil || !strings.Contains(err.Error(), tt.frag) {
			t.Errorf("%q: err = %v, want %q", tt.body, err, tt.frag)
		}
		if err != nil && strings.Contains(err.Error(), "topsecret") {
			t.Errorf("the error shows a password: %v", err)
		}
	}
	open := write("open", "admin:pw\n", 0o644)
	cfg := Default()
	cfg.Security.SASL.PlainCredentialsFile = open
	wantProblem(t, cfg.CheckFiles(), "security.sasl.plain.credentials-file", "is readable by every user")
	cfg.Security.SASL.PlainCredentialsFile = good
	cfg.ClientSASL = ClientSASLConfig{Username: "ts-1", PasswordFile: write("empty", "\n", 0o600)}
	wantProblem(t, cfg.CheckFiles(), "client.security.sasl.password-file", "the first line (the password) is empty")
	if got := (&Config{SuperUsers: "User:admin; user:ops;"}).SuperUserList(); len(got) != 2 || got[1].String() != "User:ops" {
		t.Errorf("SuperUserList = %v", got)
	}
}
