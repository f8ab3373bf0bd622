package raft

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/raft/fsm"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// voterCert issues a voter certificate for 127.0.0.1 (server and client
// use) named name from ca, returning the file paths.
func voterCert(t *testing.T, ca *testutil.CA, name string) (certFile, keyFile string) {
	t.Helper()
	f := ca.Issue(t, name, testutil.CertOptions{CommonName: name, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true})
	return f.CertFile, f.KeyFile
}

// TestMutualTLSThreeVoters: three voters talking mutual TLS with
// certificates from one CA elect a leader and replicate; a voter whose
// certificate comes from another CA cannot take part.
func TestMutualTLSThreeVoters(t *testing.T) {
	ca := testutil.NewCA(t, "metaplane test CA")
	rogue := testutil.NewCA(t, "rogue")
	c := startCluster(t, 3, func(i int, o *Options) {
		o.TLS, o.CAFile = true, ca.CertFile
		if i == 2 {
			// Voter 3's certificate is signed by a CA the others do not trust.
			o.CertFile, o.KeyFile = voterCert(t, rogue, fmt.Sprintf("voter%d", i+1))
			return
		}
		o.CertFile, o.KeyFile = voterCert(t, ca, fmt.Sprintf("voter%d", i+1))
	})
	leader := c.waitLeader()
	if leader == 2 {
		t.Fatalf("the voter with an untrusted certificate became leader")
	}
	ctx := testutil.Context(t, 20*time.Second)
	cl := c.client(leader)
	if _, _, err := core.Create(ctx, cl, "/over-tls", []byte("x"), core.CreateOptions{}); err != nil {
		t.Fatalf("write over mutual TLS: %v", err)
	}
	other := c.client(1 - leader)
	n, err := core.Get(ctx, other, "/over-tls")
	if err != nil || string(n.Data) != "x" {
		t.Fatalf("read on the other trusted voter: %q %v", n.Data, err)
	}
	// The untrusted voter hears nothing from the leader: it knows no leader
	// and has not received the entry (the trusted voters exchanged many
	// heartbeats meanwhile).
	if st, err := c.members[2].Status(); err != nil || st.LeaderID != "" {
		t.Fatalf("the voter with an untrusted certificate knows leader %q (%v)", st.LeaderID, err)
	}
	v, err := c.members[2].m.nh.StaleRead(shardID, fsm.GetManyQuery{Paths: []string{"/over-tls"}})
	if err == nil && v.(*fsm.GetManyAnswer).Results[0].Err == nil {
		t.Fatalf("the voter with an untrusted certificate received the entry")
	}
}
