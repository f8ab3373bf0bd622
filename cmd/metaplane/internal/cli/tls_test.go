package cli

import (
	"bytes"
	"crypto/tls"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/internal/tlsutil"
)

// runBinaryEnv runs the metaplane binary as a process with extra environment
// variables and returns its output and exit code.
func runBinaryEnv(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(testutil.Binary(t, "metaplane"), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errb.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run metaplane %v: %v", args, err)
	}
	return out.String(), errb.String(), 0
}

// TestTLSCoordinatorProcess runs `metaplane coordinator` (the default
// single-voter Raft backend) with its CLIENT listener mapped to SSL and
// client certificates required,
// and drives it with `metaplane admin` processes: the banner says TLS; the
// right client certificate works (flags or METAPLANE_ADMIN_TLS_*);
// plaintext, no certificate and another CA's certificate are refused and
// change nothing; a rotated certificate is served after SIGHUP without a
// restart; a `metaplane tablet-server` process configured with the same
// keys registers through it.
func TestTLSCoordinatorProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and its plugin")
	}
	testutil.Binary(t, "metaplane-backend-raft")
	ca := testutil.NewCA(t, "ca")
	other := testutil.NewCA(t, "other")
	first := ca.ServerCert(t, "coordinator")
	alice := ca.ClientCert(t, "alice")
	mallory := other.ClientCert(t, "mallory")
	port := strconv.Itoa(testutil.FreePort(t))
	addr := "127.0.0.1:" + port
	p := startCoordinatorProcess(t, t.TempDir(), "CA.pem: the CA", "-D", "coordinator.raft.port="+strconv.Itoa(testutil.FreePort(t)),
		"-D", "bind.listeners=CLIENT://"+addr, "-D", "metrics.address=127.0.0.1:0",
		"-D", "security.protocol.map=CLIENT:SSL", "-D", "security.tls.cert-file="+first.CertFile,
		"-D", "security.tls.key-file="+first.KeyFile, "-D", "security.tls.ca-file="+ca.CertFile,
		"-D", "security.tls.client-auth=required")
	cmd, stderr, out := p.cmd, p.stderr, p.banner
	for _, want := range []string{"clients:  " + addr + " (TLS, client certificates required (mutual TLS); authorizer off: every client let in may do everything)",
		"admin list-tables demo --bootstrap-servers " + addr + " --tls-ca CA.pem --tls-cert CLIENT.pem --tls-key CLIENT-key.pem"} {
		if !strings.Contains(out, want) {
			t.Errorf("banner lacks %q:\n%s", want, out)
		}
	}

	bs := "--bootstrap-servers=" + addr
	right := []string{"--tls-ca", ca.CertFile, "--tls-cert", alice.CertFile, "--tls-key", alice.KeyFile}
	testutil.WaitFor(t, 30*time.Second, "the coordinator serves over TLS", func() bool {
		_, _, code := runBinaryEnv(t, nil, append([]string{"admin", "list-databases", bs, "--timeout=2s"}, right...)...)
		return code == ExitOK
	})
	for _, tt := range []struct {
		name, want string
		args       []string
	}{
		{"plaintext", addr + " speaks TLS and this client does not: give --tls-ca", nil},
		{"no client certificate", addr + " refused this client over TLS: remote error: tls: certificate required", []string{"--tls-ca", ca.CertFile}},
		{"client certificate of another CA", addr + " refused this client over TLS: remote error: tls: unknown certificate authority",
			[]string{"--tls-ca", ca.CertFile, "--tls-cert", mallory.CertFile, "--tls-key", mallory.KeyFile}},
		{"server not trusted", "TLS handshake with " + addr + " failed: tls: failed to verify certificate",
			[]string{"--tls-ca", other.CertFile, "--tls-cert", alice.CertFile, "--tls-key", alice.KeyFile}},
	} {
		o, e, code := runBinaryEnv(t, nil, append([]string{"admin", "create-database", "refused", bs, "--timeout=3s"}, tt.args...)...)
		if code != ExitFailure || !strings.Contains(e, tt.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d (refused) saying %q\n%s", tt.name, code, e, ExitFailure, tt.want, o)
		}
	}
	if o, e, code := runBinaryEnv(t, nil, append([]string{"admin", "create-database", "shop", bs}, right...)...); code != ExitOK {
		t.Fatalf("create-database with the right certificate: exit %d\n%s%s", code, o, e)
	}
	env := []string{"METAPLANE_ADMIN_TLS_CA=" + ca.CertFile, "METAPLANE_ADMIN_TLS_CERT=" + alice.CertFile, "METAPLANE_ADMIN_TLS_KEY=" + alice.KeyFile}
	if o, e, code := runBinaryEnv(t, env, "admin", "list-databases", bs); code != ExitOK || o != "shop\n" {
		t.Fatalf("list-databases with the TLS files from the environment: exit %d, %q, want only shop\n%s", code, o, e)
	}
	if _, e, code := runBinaryEnv(t, nil, "admin", "list-databases", bs, "--tls-cert", alice.CertFile); code != ExitUsage ||
		!strings.Contains(e, "--tls-cert and --tls-key go together") {
		t.Errorf("--tls-cert without --tls-key: exit %d, %q; want a usage error", code, e)
	}

	// Rotation: new files, SIGHUP, the next connection gets the new
	// certificate; the process is the same.
	served := func() string {
		t.Helper()
		cfg, err := tlsutil.ClientConfig(tlsutil.Files{CAFile: ca.CertFile, CertFile: alice.CertFile, KeyFile: alice.KeyFile})
		if err != nil {
			t.Fatal(err)
		}
		cfg.NextProtos = []string{"h2"}
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatalf("TLS handshake: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	if got := served(); got != first.Cert.SerialNumber.String() {
		t.Fatalf("serial %s, want the first certificate's %s", got, first.Cert.SerialNumber)
	}
	second := ca.ServerCert(t, "coordinator")
	cmd.Process.Signal(syscall.SIGHUP)
	testutil.WaitFor(t, 10*time.Second, "the reload is logged", func() bool {
		return strings.Contains(stderr.String(), "TLS certificate reloaded")
	})
	if got := served(); got != second.Cert.SerialNumber.String() {
		t.Fatalf("after rotation and SIGHUP: serial %s, want the new certificate's %s", got, second.Cert.SerialNumber)
	}
	if o, e, code := runBinaryEnv(t, nil, append([]string{"admin", "list-databases", bs}, right...)...); code != ExitOK || o != "shop\n" {
		t.Fatalf("list-databases after rotation: exit %d, %q\n%s", code, o, e)
	}

	// A tablet server process with its own client certificate, configured
	// by the same keys, registers through the TLS listener.
	tsCert := ca.ClientCert(t, "tablet-server-5")
	_, tsErr, _ := startTabletServerProcess(t, "--id", "5",
		"-D", "coordinator.seed.nodes="+addr, "-D", "security.protocol.map=CLIENT:SSL",
		"-D", "security.tls.cert-file="+tsCert.CertFile, "-D", "security.tls.key-file="+tsCert.KeyFile,
		"-D", "security.tls.ca-file="+ca.CertFile)
	testutil.WaitFor(t, 30*time.Second, "the tablet server is listed", func() bool {
		o, _, code := runBinaryEnv(t, nil, append([]string{"admin", "list-tablet-servers", bs, "--timeout=2s"}, right...)...)
		return code == ExitOK && strings.Contains(o, "\n5 ")
	})
	if !strings.Contains(tsErr.String(), "following coordinators "+addr+" over TLS") {
		t.Errorf("tablet server start line %q, want it to say it follows %s over TLS", tsErr.String(), addr)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("no exit within 30s of SIGTERM")
	}
}

// TestConfigValidateTLSFiles: `config validate` reports a garbage PEM, a
// key that does not match its certificate and an expired certificate, each
// on the line of its key, and exits 1.
func TestConfigValidateTLSFiles(t *testing.T) {
	ca := testutil.NewCA(t, "ca")
	good := ca.ServerCert(t, "good")
	other := ca.ServerCert(t, "other")
	expired := ca.Issue(t, "expired", testutil.CertOptions{CommonName: "old", Server: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	garbage := t.TempDir() + "/garbage.pem"
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ssl := []string{"config", "validate", "--no-env", "-D", "security.protocol.map=CLIENT:SSL"}
	for _, tt := range []struct {
		name string
		set  []string
		want string
	}{
		{"garbage", []string{"security.tls.cert-file=" + garbage, "security.tls.key-file=" + good.KeyFile},
			"security.tls.cert-file: " + garbage + " holds no PEM certificate"},
		{"mismatched key", []string{"security.tls.cert-file=" + good.CertFile, "security.tls.key-file=" + other.KeyFile},
			"security.tls.key-file: " + other.KeyFile + " does not match the certificate in security.tls.cert-file"},
		{"expired", []string{"security.tls.cert-file=" + expired.CertFile, "security.tls.key-file=" + expired.KeyFile},
			"security.tls.cert-file: " + expired.CertFile + ": certificate CN=old expired on "},
		{"garbage CA", []string{"security.tls.cert-file=" + good.CertFile, "security.tls.key-file=" + good.KeyFile,
			"security.tls.ca-file=" + garbage, "security.tls.client-auth=required"},
			"security.tls.ca-file: " + garbage + " holds no PEM CA certificate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string(nil), ssl...)
			for _, s := range tt.set {
				args = append(args, "-D", s)
			}
			o, e, code := runCLI(t, args...)
			if code != ExitFailure || !strings.Contains(o, tt.want) {
				t.Errorf("exit %d, output:\n%s%s\nwant exit %d and a line containing %q", code, o, e, ExitFailure, tt.want)
			}
		})
	}
	o, e, code := runCLI(t, append(ssl, "-D", "security.tls.cert-file="+good.CertFile, "-D", "security.tls.key-file="+good.KeyFile)...)
	if code != ExitOK {
		t.Errorf("good files: exit %d\n%s%s", code, o, e)
	}
}

// TestAdminTLSAgainstPlaintext: TLS flags against a plaintext coordinator
// fail and say that it does not speak TLS.
func TestAdminTLSAgainstPlaintext(t *testing.T) {
	addr := startMemoryCoordinator(t)
	ca := testutil.NewCA(t, "ca")
	_, e, code := runCLI(t, "admin", "list-databases", "--bootstrap-servers="+addr, "--timeout=2s", "--tls-ca", ca.CertFile)
	if want := addr + " does not speak TLS (plaintext listener?)"; code != ExitFailure || !strings.Contains(e, want) {
		t.Errorf("exit %d, stderr %q; want %d saying %q", code, e, ExitFailure, want)
	}
}

// TestTabletServiceReloadsOnSIGHUP: a tablet server's tablet service on SSL
// serves a rotated certificate after SIGHUP, in the same process, as a
// coordinator's listener does (no coordinator is needed: the service
// serves while the server looks for one).
func TestTabletServiceReloadsOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a tablet server process")
	}
	ca := testutil.NewCA(t, "ca")
	first := ca.ServerCert(t, "tablet-server")
	listen := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	ts, stderr, _ := startTabletServerProcess(t, "--id", "7", "--listen", listen,
		"-D", "coordinator.seed.nodes=127.0.0.1:"+strconv.Itoa(testutil.FreePort(t)), "-D", "security.protocol.map=CLIENT:SSL",
		"-D", "security.tls.cert-file="+first.CertFile, "-D", "security.tls.key-file="+first.KeyFile,
		"-D", "security.tls.ca-file="+ca.CertFile)
	served := func() string {
		cfg, err := tlsutil.ClientConfig(tlsutil.Files{CAFile: ca.CertFile})
		if err != nil {
			t.Fatal(err)
		}
		cfg.NextProtos = []string{"h2"}
		c, err := tls.Dial("tcp", listen, cfg)
		if err != nil {
			return ""
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	testutil.WaitFor(t, 30*time.Second, "the tablet service serves the first certificate", func() bool {
		return served() == first.Cert.SerialNumber.String()
	})
	second := ca.ServerCert(t, "tablet-server")
	if second.CertFile != first.CertFile {
		t.Fatalf("the rotated certificate is in %s, not over %s", second.CertFile, first.CertFile)
	}
	ts.Process.Signal(syscall.SIGHUP)
	testutil.WaitFor(t, 10*time.Second, "the reload is logged", func() bool {
		return strings.Contains(stderr.String(), "TLS certificate reloaded")
	})
	if got := served(); got != second.Cert.SerialNumber.String() {
		t.Fatalf("after rotation and SIGHUP: serial %q, want the new certificate's %s\n%s", got, second.Cert.SerialNumber, stderr.String())
	}
}
