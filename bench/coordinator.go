package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/coordinator"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/image"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// benchTabletServers is how many tablet-server registrations the bench
// writes so that tables get real bucket assignments (3 replicas).
const benchTabletServers = 3

// coordRig is an in-process coordinator server on a system's plugin
// (opened through the same plugin boundary as a `metaplane coordinator`
// process would), its admin client, and a metadata image built the way the
// coordinator builds its own, for the image-read row.
type coordRig struct {
	srv    *coordinator.Server
	client *adminclient.Client
	admin  *adminClient
	// variants are the admin clients of the security rows' listeners
	// (Options.Security; security.go), by variant.
	variants       map[string]AdminAPI
	variantClients []*adminclient.Client
	cancel         context.CancelFunc
	served         chan error

	imgClient core.MetadataBackend
	img       *image.Image
	cat       *catalog.Catalog
	imgCancel context.CancelFunc
	imgDone   chan struct{}
}

// attachCoordinator starts a coordinator on s, or records why it cannot.
func attachCoordinator(ctx context.Context, env *runEnv, s *System) {
	if s.Missing == nil {
		s.Missing = map[string]string{}
	}
	if !env.needCoordinator {
		s.Missing["coordinator"] = "not started: no selected row needs it"
		return
	}
	rig, err := startCoordinator(ctx, env, s)
	if err != nil {
		s.Missing["coordinator"] = "coordinator did not start: " + err.Error()
		return
	}
	s.Coordinator = rig
	s.onClose(rig.Close)
}

func startCoordinator(ctx context.Context, env *runEnv, s *System) (*coordRig, error) {
	// Tablet servers, so that tables get bucket assignments.
	setup, err := s.NewClient(ctx, "bench-setup")
	if err != nil {
		return nil, err
	}
	defer setup.Close()
	for id := int32(1); id <= benchTabletServers; id++ {
		reg := catalog.TabletServerRegistration{
			Listeners:         fmt.Sprintf("CLIENT://127.0.0.1:%d", 19000+id),
			RegisterTimestamp: time.Now().UnixMilli(),
		}
		if err := ensureNode(ctx, setup, catalog.TabletServerPath(id), reg.Marshal()); err != nil {
			return nil, fmt.Errorf("register tablet server %d: %w", id, err)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var w io.Writer = io.Discard
	if env.opts.Log != nil {
		w = env.opts.Log
	}
	var extra []coordinator.ExtraListener
	var secureTLS *tls.Config
	if env.opts.Security {
		if extra, secureTLS, err = securedListeners(filepath.Join(env.opts.WorkDir, "tls-"+s.Name)); err != nil {
			ln.Close()
			return nil, err
		}
	}
	srv, err := coordinator.New(coordinator.Options{
		Open: func(ctx context.Context) (core.MetadataBackend, error) {
			return s.NewClient(ctx, "bench-coordinator")
		},
		Listener:       ln,
		ExtraListeners: extra,
		Logger:         slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		ln.Close()
		for _, x := range extra {
			x.Listener.Close()
		}
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	r := &coordRig{srv: srv, cancel: cancel, served: make(chan error, 1)}
	go func() { r.served <- srv.Serve(rctx) }()
	deadline := time.Now().Add(initialElectionBound)
	for !srv.IsLeader() {
		select {
		case err := <-r.served:
			cancel()
			return nil, fmt.Errorf("coordinator stopped before leading: %v", err)
		case <-srv.RoleChanged():
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.Close()
			return nil, fmt.Errorf("coordinator not leader after %v", initialElectionBound)
		}
	}
	r.client, err = adminclient.NewClient([]string{ln.Addr().String()})
	if err != nil {
		r.Close()
		return nil, err
	}
	r.admin = &adminClient{c: r.client}
	if env.opts.Security {
		if err := r.connectVariants(ctx, extra, secureTLS); err != nil {
			r.Close()
			return nil, err
		}
	}

	// The image for the image-read row: fed by the watch stream of its own
	// client, read through the catalog, as the coordinator does.
	r.imgClient, err = s.NewClient(ctx, "bench-image")
	if err != nil {
		r.Close()
		return nil, err
	}
	r.img = image.New(image.Options{Prefix: catalog.MetadataRoot})
	ictx, icancel := context.WithCancel(context.Background())
	r.imgCancel, r.imgDone = icancel, make(chan struct{})
	go func() {
		defer close(r.imgDone)
		r.img.Run(ictx, r.imgClient)
	}()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := r.img.WaitReady(wctx); err != nil {
		r.Close()
		return nil, fmt.Errorf("metadata image not ready: %w", err)
	}
	r.cat = catalog.New(r.imgClient, catalog.Options{Reader: r.img})
	return r, nil
}

// ImageGetTable implements CoordinatorRig.
func (r *coordRig) ImageGetTable(db, table string) error {
	_, err := r.cat.GetTable(context.Background(), db, table)
	return err
}

// ImageGetNode implements CoordinatorRig.
func (r *coordRig) ImageGetNode(db, table string) error {
	_, err := core.Get(context.Background(), r.img, catalog.TablePath(db, table))
	return err
}

// Admin implements CoordinatorRig.
func (r *coordRig) Admin() AdminAPI { return r.admin }

// Close stops the coordinator and the image.
func (r *coordRig) Close() error {
	if r.imgCancel != nil {
		r.imgCancel()
		<-r.imgDone
	}
	if r.imgClient != nil {
		r.imgClient.Close()
	}
	if r.client != nil {
		r.client.Close()
	}
	for _, c := range r.variantClients {
		c.Close()
	}
	r.cancel()
	select {
	case <-r.served:
	case <-time.After(30 * time.Second):
	}
	return nil
}

// adminClient is AdminAPI over the admin gRPC API.
type adminClient struct {
	c *adminclient.Client
}

func (a *adminClient) do(ctx context.Context, call func(ctx context.Context, c adminv1.AdminServiceClient) error) error {
	return a.c.Admin(ctx, call)
}

func (a *adminClient) CreateDatabase(ctx context.Context, db string) error {
	return a.do(ctx, func(ctx context.Context, c adminv1.AdminServiceClient) error {
		_, err := c.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: db, IgnoreIfExists: true})
		return err
	})
}

func benchDescriptor(partitioned bool) *adminv1.TableDescriptor {
	d := &adminv1.TableDescriptor{
		Columns: []*adminv1.Column{
			{Name: "id", Type: "BIGINT"},
			{Name: "name", Type: "STRING"},
			{Name: "dt", Type: "STRING"},
		},
		BucketCount:       3,
		ReplicationFactor: 3,
	}
	if partitioned {
		d.PartitionKeys = []string{"dt"}
	}
	return d
}

func (a *adminClient) CreateTable(ctx context.Context, db, table string, partitioned bool) error {
	return a.do(ctx, func(ctx context.Context, c adminv1.AdminServiceClient) error {
		_, err := c.CreateTable(ctx, &adminv1.CreateTableRequest{Database: db, Table: table, Descriptor_: benchDescriptor(partitioned)})
		return err
	})
}

func (a *adminClient) DropTable(ctx context.Context, db, table string) error {
	return a.do(ctx, func(ctx context.Context, c adminv1.AdminServiceClient) error {
		_, err := c.DropTable(ctx, &adminv1.DropTableRequest{Database: db, Table: table})
		return err
	})
}

func (a *adminClient) CreatePartition(ctx context.Context, db, table, partition string) error {
	return a.do(ctx, func(ctx context.Context, c adminv1.AdminServiceClient) error {
		_, err := c.CreatePartition(ctx, &adminv1.CreatePartitionRequest{Database: db, Table: table, Partition: partition})
		return err
	})
}

func (a *adminClient) GetTableInfo(ctx context.Context, db, table string) error {
	return a.do(ctx, func(ctx context.Context, c adminv1.AdminServiceClient) error {
		res, err := c.GetTableInfo(ctx, &adminv1.GetTableInfoRequest{Database: db, Table: table})
		if err == nil && res.GetTable() == nil {
			err = errors.New("getTableInfo answered without a table")
		}
		return err
	})
}

func (a *adminClient) ListTables(ctx context.Context, db string) (int, error) {
	n := 0
	err := a.do(ctx, func(ctx context.Context, c adminv1.AdminServiceClient) error {
		res, err := c.ListTables(ctx, &adminv1.ListTablesRequest{Database: db})
		n = len(res.GetNames())
		return err
	})
	return n, err
}

func (a *adminClient) ListPartitionInfos(ctx context.Context, db, table string) (int, error) {
	n := 0
	err := a.do(ctx, func(ctx context.Context, c adminv1.AdminServiceClient) error {
		res, err := c.ListPartitions(ctx, &adminv1.ListPartitionsRequest{Database: db, Table: table})
		n = len(res.GetPartitions())
		return err
	})
	return n, err
}
