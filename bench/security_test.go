package bench

import (
	"crypto/tls"
	"strings"
	"testing"

	"google.golang.org/grpc/credentials"
)

// TestSecurityRatios: a security row is noted with its p50 over the
// plaintext row's, per backend measured on both; a backend missing on one
// side gets no ratio.
func TestSecurityRatios(t *testing.T) {
	rep := &Report{Rows: []Row{
		{ID: "admin.create-table", Results: []Result{{Backend: Raft, P50Micros: 4000}, {Backend: ZooKeeper, P50Micros: 20000}}},
		{ID: "admin.create-table.tls", Results: []Result{{Backend: Raft, P50Micros: 5000}, {Backend: ZooKeeper, Unavailable: "down"}}},
		{ID: "admin.create-table.tls-authz", Results: []Result{{Backend: ZooKeeper, P50Micros: 21000}}},
	}}
	securityRatios(rep)
	if got := rep.Rows[1].Note; !strings.Contains(got, "1.25x plaintext on raft") || strings.Contains(got, "zookeeper") {
		t.Errorf("tls note %q, want 1.25x on raft only", got)
	}
	if got := rep.Rows[2].Note; !strings.Contains(got, "(tls-authz): 1.05x plaintext on zookeeper") {
		t.Errorf("tls-authz note %q, want 1.05x on zookeeper", got)
	}
	if rep.Rows[0].Note != "" || len(rep.Notes) != 2 {
		t.Errorf("plain row note %q, report notes %q", rep.Rows[0].Note, rep.Notes)
	}
}

// TestSecurityRowsCertificates: the generated certificates serve and
// dial: a mutual-TLS listener accepts the bench's client certificate.
func TestSecurityRowsCertificates(t *testing.T) {
	extra, ccfg, err := securedListeners(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, x := range extra {
			x.Listener.Close()
		}
	}()
	if len(extra) != 2 || extra[0].Security.Authorize || !extra[1].Security.Authorize || ccfg.GetClientCertificate == nil {
		t.Fatalf("listeners %+v, client certificate %v", extra, ccfg.GetClientCertificate != nil)
	}
	got := make(chan string, 1)
	go func() {
		c, err := extra[0].Listener.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		_, info, err := extra[0].Credentials.ServerHandshake(c)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- info.(credentials.TLSInfo).State.PeerCertificates[0].Subject.CommonName
	}()
	cfg := ccfg.Clone()
	cfg.ServerName, cfg.NextProtos = "127.0.0.1", []string{"h2"}
	conn, err := tls.Dial("tcp", extra[0].Listener.Addr().String(), cfg)
	if err != nil {
		t.Fatalf("handshake with the generated certificates: %v", err)
	}
	defer conn.Close()
	if cn := <-got; cn != benchPrincipal {
		t.Fatalf("the listener saw %q, want the client certificate's CN %q", cn, benchPrincipal)
	}
	for _, id := range []string{"admin.get-table-info.tls", "admin.create-table.tls-authz"} {
		found := false
		for _, r := range securityRows() {
			found = found || r.id == id
		}
		if !found {
			t.Errorf("no row %s", id)
		}
	}
}
