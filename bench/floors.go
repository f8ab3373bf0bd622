package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/metaplane/metaplane/core"
)

// The machine floors a run measures before its rows: what the hardware and
// the process boundaries cost at the least, so that each latency row can be
// read as a multiple of what it cannot go below.
const (
	// FloorFsync is one 512-byte write plus fsync of a file in the run's
	// work directory: the filesystem the Raft logs and ZooKeeper's data
	// live on.
	FloorFsync = "fsync"
	// FloorPluginHop is one call into a backend plugin process that does
	// no work (Status on the memory plugin): the go-plugin gRPC hop.
	FloorPluginHop = "plugin-hop"
	// FloorLoopback is one gRPC unary round trip over 127.0.0.1 TCP (a
	// health check): a client-to-coordinator call, or a leader-to-follower
	// replication message.
	FloorLoopback = "loopback-grpc"
)

// Floor is one machine floor as measured in the run.
type Floor struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	// Unavailable, when set, says why the floor was not measured.
	Unavailable string  `json:"unavailable,omitempty"`
	N           int     `json:"n"`
	P50Micros   float64 `json:"p50_us"`
	P99Micros   float64 `json:"p99_us"`
}

// measureFloors measures every floor, n calls each. A floor that cannot be
// measured is reported with the reason; it never fails the run.
func measureFloors(ctx context.Context, env *runEnv, n int) []Floor {
	probes := []struct {
		id, title string
		prepare   func(ctx context.Context) (call func(ctx context.Context) error, done func(), err error)
	}{
		{FloorFsync, "512-byte write + fsync in the work directory", func(ctx context.Context) (func(context.Context) error, func(), error) {
			return fsyncProbe(env.opts.WorkDir)
		}},
		{FloorPluginHop, "no-op call into a plugin process (memory Status)", func(ctx context.Context) (func(context.Context) error, func(), error) {
			return pluginHopProbe(ctx, env)
		}},
		{FloorLoopback, "gRPC round trip over 127.0.0.1 (health check)", func(ctx context.Context) (func(context.Context) error, func(), error) {
			return loopbackProbe()
		}},
	}
	var out []Floor
	for _, pr := range probes {
		f := Floor{ID: pr.id, Title: pr.title}
		call, done, err := pr.prepare(ctx)
		if err != nil {
			f.Unavailable = err.Error()
			out = append(out, f)
			continue
		}
		samples := make([]time.Duration, 0, n)
		for i := 0; i < n && ctx.Err() == nil; i++ {
			start := time.Now()
			if err := call(ctx); err != nil {
				f.Unavailable = err.Error()
				break
			}
			samples = append(samples, time.Since(start))
		}
		done()
		if f.Unavailable == "" && len(samples) > 0 {
			s := Summarize(samples, int64(len(samples)), 0)
			f.N, f.P50Micros, f.P99Micros = s.N, micros(s.P50), micros(s.P99)
		} else if f.Unavailable == "" {
			f.Unavailable = "no sample"
		}
		env.opts.logf("  floor %s: p50 %s", f.ID, FormatDuration(f.P50Micros))
		out = append(out, f)
	}
	return out
}

func fsyncProbe(dir string) (func(context.Context) error, func(), error) {
	f, err := os.CreateTemp(dir, "floor-fsync-")
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, 512)
	call := func(context.Context) error {
		if _, err := f.WriteAt(buf, 0); err != nil {
			return err
		}
		return f.Sync()
	}
	return call, func() { f.Close(); os.Remove(filepath.Clean(f.Name())) }, nil
}

func pluginHopProbe(ctx context.Context, env *runEnv) (func(context.Context) error, func(), error) {
	m, err := env.newMember(Memory, "floor: memory plugin", nil, false)
	if err != nil {
		return nil, nil, err
	}
	if err := m.start(ctx); err != nil {
		return nil, nil, err
	}
	c, err := m.client(ctx, core.ClientOptions{Name: "floor"})
	if err != nil {
		m.close()
		return nil, nil, err
	}
	call := func(ctx context.Context) error { _, err := c.Status(ctx); return err }
	return call, func() { c.Close(); m.close() }, nil
}

func loopbackProbe() (func(context.Context) error, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(l)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, nil, err
	}
	hc := healthpb.NewHealthClient(cc)
	call := func(ctx context.Context) error {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	return call, func() { cc.Close(); srv.Stop() }, nil
}

// floorsOf returns the floors a row's latency cannot go below with the
// given number of voters, or nil when none applies (in-process reads,
// throughput rows, per-id means, elections).
func floorsOf(rowID string, voters int) []string {
	replicated := func(fl ...string) []string {
		if voters > 1 {
			fl = append(fl, FloorLoopback)
		}
		return fl
	}
	switch rowID {
	case "store.get":
		return []string{FloorPluginHop}
	case "store.write-serial":
		return replicated(FloorFsync, FloorPluginHop)
	case "admin.get-table-info", "admin.list-tables", "admin.list-partitions", "zk.raw-get":
		return []string{FloorLoopback}
	case "zk.raw-write-serial":
		return replicated(FloorLoopback, FloorFsync)
	case "admin.create-table", "admin.drop-table", "admin.create-partition":
		return replicated(FloorLoopback, FloorPluginHop, FloorFsync)
	}
	return nil
}

// applyFloors sets each latency row's floor and each result's ratio to it.
func applyFloors(rep *Report) {
	p50 := map[string]float64{}
	for _, f := range rep.Floors {
		if f.Unavailable == "" && f.P50Micros > 0 {
			p50[f.ID] = f.P50Micros
		}
	}
	for i := range rep.Rows {
		row := &rep.Rows[i]
		ids := floorsOf(row.ID, rep.Options.Voters)
		if len(ids) == 0 || row.Metric != MetricP50 {
			continue
		}
		sum := 0.0
		for _, id := range ids {
			v, ok := p50[id]
			if !ok {
				sum = 0
				break
			}
			sum += v
		}
		if sum == 0 {
			continue
		}
		row.Floor = &RowFloor{Floors: ids, P50Micros: round3(sum)}
		for j := range row.Results {
			if res := &row.Results[j]; res.Available() {
				res.FloorRatio = round3(res.P50Micros / sum)
			}
		}
	}
}

// floorLabel names a row's floor for the tables ("fsync+plugin-hop").
func (f *RowFloor) label() string {
	s := ""
	for i, id := range f.Floors {
		if i > 0 {
			s += "+"
		}
		s += id
	}
	return fmt.Sprintf("%s %s", s, FormatDuration(f.P50Micros))
}
