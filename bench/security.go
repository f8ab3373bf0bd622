package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/internal/tlsutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// The client-listener variants of the security rows (Options.Security):
// the same coordinator leader serves its plaintext listener and two more,
// so that a row and its variants differ only by the listener they call.
const (
	// variantTLS: mutual TLS (client certificates required), authorizer
	// off.
	variantTLS = "tls"
	// variantTLSAuthz: mutual TLS, authorizer on; the bench's principal
	// (User:bench, from its certificate) is no super user: every call is
	// decided by the ACLs it was granted (ALL on the cluster).
	variantTLSAuthz = "tls-authz"
)

// benchPrincipal is the common name of the bench's client certificate.
const benchPrincipal = "bench"

// securityRows are the rows of Options.Security: admin rows of the plain
// table measured again on the TLS and TLS-with-authorizer listeners. Each
// row's note gives its ratio to the plaintext row (securityRatios).
func securityRows() []rowSpec {
	var out []rowSpec
	for _, base := range []struct {
		id, title string
		prepare   func(context.Context, *System, plan) (*workload, error)
	}{
		{"admin.get-table-info", "getTableInfo", prepareGetTableInfo},
		{"admin.create-table", "createTable", prepareCreateTable},
	} {
		for _, v := range []struct{ name, words string }{
			{variantTLS, "over mutual TLS"},
			{variantTLSAuthz, "over mutual TLS, authorizer on"},
		} {
			out = append(out, rowSpec{
				id: base.id + "." + v.name, coordinator: true, group: "client security", metric: MetricP50,
				title:   base.title + " (admin API) " + v.words,
				prepare: overVariant(v.name, base.prepare),
			})
		}
	}
	return out
}

// overVariant prepares row on the system with its admin calls sent to the
// variant's listener.
func overVariant(variant string, prepare func(context.Context, *System, plan) (*workload, error)) func(context.Context, *System, plan) (*workload, error) {
	return func(ctx context.Context, s *System, p plan) (*workload, error) {
		co, err := coordinatorOf(s)
		if err != nil {
			return nil, err
		}
		r, ok := co.(*coordRig)
		if !ok || r.variants[variant] == nil {
			return nil, fmt.Errorf("the coordinator has no %s listener (run with --security)", variant)
		}
		sv := *s
		sv.Coordinator = variantRig{CoordinatorRig: co, admin: r.variants[variant]}
		return prepare(ctx, &sv, p)
	}
}

// variantRig is a coordinator rig whose admin calls go to another
// listener of the same leader.
type variantRig struct {
	CoordinatorRig
	admin AdminAPI
}

func (v variantRig) Admin() AdminAPI { return v.admin }

// securedListeners returns the extra listeners of the security rows and
// the client TLS configuration that speaks to them (the bench's
// certificate), with certificates generated for the run under dir.
func securedListeners(dir string) ([]coordinator.ExtraListener, *tls.Config, error) {
	files, err := writeBenchCerts(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("bench certificates: %w", err)
	}
	r, err := tlsutil.NewReloader(tlsutil.Files{CertFile: files.serverCert, KeyFile: files.serverKey, CAFile: files.ca})
	if err != nil {
		return nil, nil, err
	}
	scfg, err := r.ServerConfig(tls.RequireAndVerifyClientCert)
	if err != nil {
		return nil, nil, err
	}
	ccfg, err := tlsutil.ClientConfig(tlsutil.Files{CAFile: files.ca, CertFile: files.clientCert, KeyFile: files.clientKey})
	if err != nil {
		return nil, nil, err
	}
	var out []coordinator.ExtraListener
	for _, authz := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, x := range out {
				x.Listener.Close()
			}
			return nil, nil, err
		}
		out = append(out, coordinator.ExtraListener{Listener: ln, Credentials: credentials.NewTLS(scfg),
			Security: coordinator.Security{Authorize: authz}})
	}
	return out, ccfg, nil
}

// connectVariants opens the admin clients of the extra listeners (in
// securedListeners' order) and grants the bench's principal ALL on the
// cluster through the plaintext client, so that the authorizer's listener
// decides every call from the ACLs.
func (r *coordRig) connectVariants(ctx context.Context, extra []coordinator.ExtraListener, ccfg *tls.Config) error {
	r.variants = map[string]AdminAPI{}
	for i, name := range []string{variantTLS, variantTLSAuthz} {
		c, err := adminclient.NewClientWithOptions([]string{extra[i].Listener.Addr().String()}, adminclient.Options{TLS: ccfg})
		if err != nil {
			return err
		}
		r.variantClients = append(r.variantClients, c)
		r.variants[name] = &adminClient{c: c}
	}
	if err := r.client.Admin(ctx, func(ctx context.Context, c adminv1.AdminServiceClient) error {
		_, err := c.AddACLs(ctx, &adminv1.AddACLsRequest{ResourceType: coordinator.ResourceCluster, ResourceName: coordinator.ClusterResource.Name,
			Acls: []*adminv1.ACLEntry{{PrincipalType: strings.ToUpper(config.PrincipalUser), PrincipalName: benchPrincipal,
				PermissionType: "ALLOW", Operation: coordinator.OpAll, Host: "*"}}})
		return err
	}); err != nil {
		return fmt.Errorf("grant User:%s ALL on the cluster: %w", benchPrincipal, err)
	}
	// The grant reaches the leader's image asynchronously: wait (bounded)
	// until the authorizer's listener lets a write through.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := r.variants[variantTLSAuthz].CreateDatabase(ctx, benchDB)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the authorizer's listener still refuses User:%s after its grant: %w", benchPrincipal, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// securityRatios notes on every security row (and in the report's notes,
// which the table prints) its p50 as a ratio to the plaintext row it
// varies, per backend ("1.08x plaintext on raft").
func securityRatios(rep *Report) {
	byID := map[string]*Row{}
	for i := range rep.Rows {
		byID[rep.Rows[i].ID] = &rep.Rows[i]
	}
	for i := range rep.Rows {
		row := &rep.Rows[i]
		base, variant, ok := cutVariant(row.ID)
		if !ok || byID[base] == nil {
			continue
		}
		plain := map[string]float64{}
		for _, res := range byID[base].Results {
			if res.Unavailable == "" && res.P50Micros > 0 {
				plain[res.Backend] = res.P50Micros
			}
		}
		var parts []string
		for _, res := range row.Results {
			if b := plain[res.Backend]; b > 0 && res.Unavailable == "" && res.P50Micros > 0 {
				parts = append(parts, fmt.Sprintf("%.2fx plaintext on %s", res.P50Micros/b, res.Backend))
			}
		}
		sort.Strings(parts)
		if len(parts) == 0 {
			parts = []string{"no ratio: " + base + " was not measured on the same backends (select it too)"}
		}
		row.Note = fmt.Sprintf("p50 vs %s (%s): %s", base, variant, strings.Join(parts, ", "))
		rep.Notes = append(rep.Notes, row.ID+": "+row.Note)
	}
}

func cutVariant(id string) (base, variant string, ok bool) {
	for _, v := range []string{variantTLSAuthz, variantTLS} {
		if b, found := strings.CutSuffix(id, "."+v); found {
			return b, v, true
		}
	}
	return "", "", false
}

// benchCertFiles are the PEM files of one run's certificates.
type benchCertFiles struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

// writeBenchCerts generates a CA, a server certificate for 127.0.0.1 and
// the bench's client certificate (CN bench), valid for a day, into dir.
func writeBenchCerts(dir string) (benchCertFiles, error) {
	ca, err := tlsutil.NewCA(dir, "metaplane-bench")
	if err != nil {
		return benchCertFiles{}, err
	}
	srv, err := ca.Issue("bench-coordinator", tlsutil.CertOptions{CommonName: "bench-coordinator", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		return benchCertFiles{}, err
	}
	cli, err := ca.Issue(benchPrincipal, tlsutil.CertOptions{CommonName: benchPrincipal, Client: true})
	if err != nil {
		return benchCertFiles{}, err
	}
	return benchCertFiles{ca: ca.CertFile, serverCert: srv.CertFile, serverKey: srv.KeyFile, clientCert: cli.CertFile, clientKey: cli.KeyFile}, nil
}
