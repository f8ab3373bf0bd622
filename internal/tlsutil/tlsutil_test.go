package tlsutil

import (
	"crypto/tls"
	"os"
	"sync"
	"testing"
)

// serve accepts TLS connections on 127.0.0.1 with cfg until the test ends,
// completing each handshake.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte{1}) // lets the client see the handshake's outcome
				}
			}()
		}
	}()
	return l.Addr().String()
}

// dial completes a handshake (and reads the server's first byte, so that
// a client certificate the server refuses shows as an error) and returns
// the server certificate's serial number.
func dial(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func TestMutualTLS(t *testing.T) {
	ca := newTestCA(t, "ca")
	other := newTestCA(t, "other")
	srv := ca.ServerCert(t, "server")
	r, err := NewReloader(Files{CertFile: srv.CertFile, KeyFile: srv.KeyFile, CAFile: ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	scfg, err := r.ServerConfig(tls.RequireAndVerifyClientCert)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, scfg)
	good := ca.ClientCert(t, "alice")
	stranger := other.ClientCert(t, "mallory")
	for _, tt := range []struct {
		name  string
		files Files
		ok    bool
	}{
		{"right client certificate", Files{CAFile: ca.CertFile, CertFile: good.CertFile, KeyFile: good.KeyFile}, true},
		{"no client certificate", Files{CAFile: ca.CertFile}, false},
		{"client certificate of another CA", Files{CAFile: ca.CertFile, CertFile: stranger.CertFile, KeyFile: stranger.KeyFile}, false},
		{"server not trusted", Files{CAFile: other.CertFile, CertFile: good.CertFile, KeyFile: good.KeyFile}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ccfg, err := ClientConfig(tt.files)
			if err != nil {
				t.Fatal(err)
			}
			_, err = dial(addr, ccfg)
			if (err == nil) != tt.ok {
				t.Errorf("handshake error %v, want success %v", err, tt.ok)
			}
		})
	}
	t.Run("TLS 1.1 refused", func(t *testing.T) {
		ccfg, _ := ClientConfig(Files{CAFile: ca.CertFile, CertFile: good.CertFile, KeyFile: good.KeyFile})
		ccfg.MinVersion, ccfg.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
		if _, err := dial(addr, ccfg); err == nil {
			t.Error("a TLS 1.1 handshake succeeded, want refused")
		}
	})
}

// TestRotation: a certificate written over the files is served at the next
// handshake; a broken write keeps the previous one in service (and says so
// through OnReload); Reload re-reads on demand.
func TestRotation(t *testing.T) {
	ca := newTestCA(t, "ca")
	first := ca.ServerCert(t, "server")
	r, err := NewReloader(Files{CertFile: first.CertFile, KeyFile: first.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		reloads []error
	)
	r.OnReload = func(err error) { mu.Lock(); reloads = append(reloads, err); mu.Unlock() }
	scfg, err := r.ServerConfig(tls.NoClientCert)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, scfg)
	ccfg, err := ClientConfig(Files{CAFile: ca.CertFile})
	if err != nil {
		t.Fatal(err)
	}
	got, err := dial(addr, ccfg)
	if err != nil || got != first.Cert.SerialNumber.String() {
		t.Fatalf("first handshake: serial %s, %v; want %s", got, err, first.Cert.SerialNumber)
	}

	second := ca.ServerCert(t, "server") // overwrites the same files
	got, err = dial(addr, ccfg)
	if err != nil || got != second.Cert.SerialNumber.String() {
		t.Fatalf("after rotation: serial %s, %v; want the new certificate's %s", got, err, second.Cert.SerialNumber)
	}

	if err := os.WriteFile(second.KeyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = dial(addr, ccfg)
	if err != nil || got != second.Cert.SerialNumber.String() {
		t.Fatalf("after a broken key: serial %s, %v; want the previous certificate %s still served", got, err, second.Cert.SerialNumber)
	}
	mu.Lock()
	if len(reloads) != 2 || reloads[0] != nil || reloads[1] == nil {
		t.Fatalf("reloads %v, want one success then one failure", reloads)
	}
	mu.Unlock()
	if err := r.Reload(); err == nil {
		t.Error("Reload of a broken key succeeded")
	}

	third := ca.ServerCert(t, "server")
	if err := r.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := r.Certificate().Leaf.SerialNumber.String(); got != third.Cert.SerialNumber.String() {
		t.Errorf("after Reload: serial %s, want %s", got, third.Cert.SerialNumber)
	}
}

func TestRefusedSetups(t *testing.T) {
	ca := newTestCA(t, "ca")
	srv := ca.ServerCert(t, "server")
	if _, err := NewReloader(Files{CertFile: srv.CertFile}); err == nil {
		t.Error("a certificate without its key accepted")
	}
	if _, err := NewReloader(Files{CertFile: srv.CertFile, KeyFile: ca.CertFile}); err == nil {
		t.Error("a CA certificate as key accepted")
	}
	if _, err := NewReloader(Files{CAFile: srv.KeyFile}); err == nil {
		t.Error("a key as CA accepted")
	}
	r, err := NewReloader(Files{CertFile: srv.CertFile, KeyFile: srv.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ServerConfig(tls.RequireAndVerifyClientCert); err == nil {
		t.Error("client verification without a CA accepted")
	}
	for mode, want := range map[string]tls.ClientAuthType{"none": tls.NoClientCert, "request": tls.VerifyClientCertIfGiven, "required": tls.RequireAndVerifyClientCert} {
		if got, err := ClientAuth(mode); err != nil || got != want {
			t.Errorf("ClientAuth(%s) = %v, %v; want %v", mode, got, err, want)
		}
	}
	if _, err := ClientAuth("yes"); err == nil {
		t.Error("ClientAuth(yes) accepted")
	}
}
