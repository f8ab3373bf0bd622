package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/internal/testutil"
)

// TestSASLCoordinatorProcess runs `metaplane coordinator` with its CLIENT
// listener on SASL_SSL and the authorizer on, and drives it with `metaplane
// admin` processes: a call without a password, or with a wrong one, exits
// 1 saying so (never printing the password) and changes nothing; the super
// user may do everything; another user only what an ACL grants; a
// `metaplane tablet-server` with client.security.sasl.* registers once its
// principal is granted WRITE and READ on the cluster; SIGHUP re-reads the
// credentials file.
func TestSASLCoordinatorProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and its plugin")
	}
	testutil.Binary(t, "metaplane-backend-raft")
	ca := testutil.NewCA(t, "ca")
	srv := ca.ServerCert(t, "coordinator")
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	users := write("users", "admin:admin-secret\nbob:bob-secret\nts-5:ts-secret\n")
	adminPW, bobPW, wrongPW, tsPW := write("admin.pw", "admin-secret\n"), write("bob.pw", "bob-secret\n"), write("wrong.pw", "not-the-secret\n"), write("ts.pw", "ts-secret\n")

	// PLAIN on a plaintext listener is refused before anything starts.
	o, e, code := runBinaryEnv(t, nil, "config", "validate", "--no-env", "-D", "security.protocol.map=CLIENT:SASL")
	if code != ExitFailure || !strings.Contains(o+e, "security.protocol.map") || !strings.Contains(o+e, "security.sasl.enabled.mechanisms") {
		t.Errorf("config validate with SASL on a plaintext listener: exit %d\n%s%s", code, o, e)
	}

	addr := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	tlsKeys := []string{"-D", "security.protocol.map=CLIENT:SASL_SSL", "-D", "security.tls.ca-file=" + ca.CertFile}
	p := startCoordinatorProcess(t, t.TempDir(), "CA.pem: the CA", append(tlsKeys,
		"-D", "coordinator.raft.port="+strconv.Itoa(testutil.FreePort(t)),
		"-D", "bind.listeners=CLIENT://"+addr, "-D", "metrics.address=127.0.0.1:0",
		"-D", "security.tls.cert-file="+srv.CertFile, "-D", "security.tls.key-file="+srv.KeyFile,
		"-D", "security.sasl.plain.credentials-file="+users,
		"-D", "authorizer.enabled=true", "-D", "super.users=User:admin")...)
	for _, want := range []string{"then a username and password with every call (SASL PLAIN); authorizer on: every call checked against the stored ACLs (super users User:admin)",
		"--user NAME --password-file PASSWORD-FILE"} {
		if !strings.Contains(p.banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, p.banner)
		}
	}
	bs := "--bootstrap-servers=" + addr
	as := func(user, pwFile string, args ...string) (string, string, int) {
		a := append([]string{"admin"}, args...)
		a = append(a, bs, "--tls-ca", ca.CertFile, "--timeout=5s")
		if user != "" {
			a = append(a, "--user", user, "--password-file", pwFile)
		}
		return runBinaryEnv(t, nil, a...)
	}
	testutil.WaitFor(t, 30*time.Second, "the coordinator serves", func() bool {
		_, _, code := as("admin", adminPW, "list-databases")
		return code == ExitOK
	})
	for _, tt := range []struct{ name, user, pw, want string }{
		{"no password", "", "", "needs a username and password"},
		{"wrong password", "admin", wrongPW, "wrong username or password"},
		{"unknown user", "eve", adminPW, "wrong username or password"},
	} {
		o, e, code := as(tt.user, tt.pw, "create-database", "refused")
		if code != ExitFailure || !strings.Contains(e, tt.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d saying %q\n%s", tt.name, code, e, ExitFailure, tt.want, o)
		}
		if strings.Contains(o+e, "secret") {
			t.Errorf("%s: the output shows a password: %s%s", tt.name, o, e)
		}
	}
	if _, e, code := as("bob", bobPW, "create-database", "bobs"); code != ExitFailure || !strings.Contains(e, "User:bob may not CREATE on CLUSTER fluss-cluster") {
		t.Errorf("bob without ACLs: exit %d, %q; want PERMISSION_DENIED naming CREATE on the cluster", code, e)
	}
	if o, e, code := as("admin", adminPW, "list-databases"); code != ExitOK || strings.TrimSpace(o) != "(no databases)" {
		t.Fatalf("refused calls changed the catalog: exit %d, %q %s", code, o, e)
	}
	for _, args := range [][]string{
		{"create-database", "shop"},
		{"add-acl", "DATABASE", "shop", "--principal", "USER:bob", "--operation", "CREATE"},
		{"add-acl", "CLUSTER", "fluss-cluster", "--principal", "USER:ts-5", "--operation", "WRITE"},
		{"add-acl", "CLUSTER", "fluss-cluster", "--principal", "USER:ts-5", "--operation", "READ"},
	} {
		if o, e, code := as("admin", adminPW, args...); code != ExitOK {
			t.Fatalf("admin %v: exit %d\n%s%s", args, code, o, e)
		}
	}
	if o, e, code := as("bob", bobPW, "create-table", "shop.orders", "--column", "id:BIGINT", "--buckets", "1", "--replication-factor", "1"); code != ExitOK {
		t.Errorf("bob with CREATE on shop: exit %d\n%s%s", code, o, e)
	}
	if o, e, code := as("bob", bobPW, "list-databases"); code != ExitOK || strings.TrimSpace(o) != "shop" {
		t.Errorf("bob lists %q (exit %d, %s), want only shop", o, code, e)
	}

	// Its tablet service is on SASL_SSL too: TLS with its own certificate.
	tsCert := ca.ServerCert(t, "tablet-server-5")
	_, tsErr, _ := startTabletServerProcess(t, append([]string{"--id", "5",
		"-D", "coordinator.seed.nodes=" + addr, "-D", "client.security.sasl.username=ts-5",
		"-D", "client.security.sasl.password-file=" + tsPW,
		"-D", "security.tls.cert-file=" + tsCert.CertFile, "-D", "security.tls.key-file=" + tsCert.KeyFile}, tlsKeys...)...)
	testutil.WaitFor(t, 30*time.Second, "the tablet server is listed", func() bool {
		o, _, code := as("admin", adminPW, "list-tablet-servers")
		return code == ExitOK && strings.Contains(o, "\n5 ")
	})
	if !strings.Contains(tsErr.String(), "over TLS as User:ts-5") {
		t.Errorf("tablet server start line %q, want it to say it authenticates as User:ts-5", tsErr.String())
	}

	// The raft verbs speak the same flags.
	if o, e, code := runBinaryEnv(t, nil, "raft", "status", bs, "--tls-ca", ca.CertFile, "--user", "admin", "--password-file", adminPW); code != ExitOK {
		t.Errorf("raft status as the super user: exit %d\n%s%s", code, o, e)
	}
	if o, e, code := runBinaryEnv(t, nil, "raft", "status", bs, "--tls-ca", ca.CertFile, "--user", "bob", "--password-file", bobPW); code != ExitFailure || !strings.Contains(o+e, "may not DESCRIBE") {
		t.Errorf("raft status as bob: exit %d, want 1 saying DESCRIBE on the cluster is not his\n%s%s", code, o, e)
	}

	// A new credentials file, SIGHUP: bob's old password no longer works.
	write("users", "admin:admin-secret\nbob:bob-new-secret\nts-5:ts-secret\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	testutil.WaitFor(t, 10*time.Second, "the credentials reload is logged", func() bool {
		return strings.Contains(p.stderr.String(), "credentials file reloaded")
	})
	if _, e, code := as("bob", bobPW, "list-databases"); code != ExitFailure || !strings.Contains(e, "wrong username or password") {
		t.Errorf("bob's old password after the reload: exit %d, %q", code, e)
	}
	if strings.Contains(p.stderr.String(), "secret") {
		t.Errorf("the coordinator's log shows a password")
	}
}
