package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/metaplane/metaplane/core"
)

// The bench's own key space, under which every store row works.
const benchRoot = "/metaplane-bench"

// seq hands out unique suffixes for names across rounds and backends.
var seq atomic.Int64

func nextName(prefix string) string { return fmt.Sprintf("%s%d", prefix, seq.Add(1)) }

// allRows is the table, in the order of the seeds' table.
func allRows() []rowSpec {
	return []rowSpec{
		{
			id: "store.get", title: "store get (through the plugin)", group: "reads", metric: MetricP50,
			seed:    &SeedFigure{ZooKeeperMicros: 102, RaftMicros: 1.6, Note: "seed getTable store read; its Raft figure is an in-process KvStore read, ours crosses the plugin process boundary"},
			prepare: prepareStoreGet,
		},
		{
			id: "image.get-table", coordinator: true, title: "catalog read from the image", group: "reads", metric: MetricP50,
			seed:    &SeedFigure{RaftMicros: 1.6, Note: "the seed's closest figure: an in-process store read"},
			prepare: prepareImageRead,
		},
		{
			id: "image.get-node", coordinator: true, title: "image node lookup (raw bytes)", group: "reads", metric: MetricP50,
			note:    "the table's node read from the image without decoding: the map lookup alone",
			prepare: prepareImageNode,
		},
		{
			id: "admin.get-table-info", coordinator: true, title: "getTableInfo (admin API)", group: "admin reads", metric: MetricP50,
			seed: &SeedFigure{ZooKeeperMicros: 421, RaftMicros: 89}, prepare: prepareGetTableInfo,
		},
		{
			id: "admin.list-tables", coordinator: true, title: "listTables (admin API, 20 tables)", group: "admin reads", metric: MetricP50,
			seed: &SeedFigure{ZooKeeperMicros: 283, RaftMicros: 70}, prepare: prepareListTables,
		},
		{
			id: "admin.list-partitions", coordinator: true, title: "listPartitionInfos, 1000 partitions", group: "admin reads", metric: MetricP50,
			seed: &SeedFigure{ZooKeeperMicros: 18500, RaftMicros: 500}, prepare: prepareListPartitions,
		},
		{
			id: "ids.block-1", title: "sequence id, blocks of 1 (ZK: 1:1 CAS)", group: "sequence ids", metric: MetricMean,
			seed:    &SeedFigure{ZooKeeperMicros: 4871, RaftMicros: 8194, Note: "µs per id"},
			prepare: prepareIDs(1),
		},
		{
			id: "ids.block-64", title: "sequence id, blocks of 64", group: "sequence ids", metric: MetricMean,
			seed:    &SeedFigure{RaftMicros: 127, Note: "µs per id"},
			prepare: prepareIDs(64),
		},
		{
			id: "ids.block-1000", title: "sequence id, blocks of 1000", group: "sequence ids", metric: MetricMean,
			seed:    &SeedFigure{RaftMicros: 8.5, Note: "µs per id; the seed's ZooKeeper comparison is its 1:1 CAS (4871 µs)"},
			prepare: prepareIDs(1000),
		},
		{
			id: "admin.create-table", coordinator: true, title: "createTable (admin API)", group: "DDL", metric: MetricP50,
			seed: &SeedFigure{ZooKeeperMicros: 40300, RaftMicros: 9300}, prepare: prepareCreateTable,
		},
		{
			id: "admin.drop-table", coordinator: true, title: "dropTable (admin API)", group: "DDL", metric: MetricP50,
			seed: &SeedFigure{ZooKeeperMicros: 89300, RaftMicros: 43700}, prepare: prepareDropTable,
		},
		{
			id: "admin.create-partition", coordinator: true, title: "createPartition (admin API)", group: "DDL", metric: MetricP50,
			seed: &SeedFigure{ZooKeeperMicros: 28800, RaftMicros: 17000}, prepare: prepareCreatePartition,
		},
		{
			id: "store.write-serial", title: "single-key write, serial", group: "writes", metric: MetricP50,
			seed: &SeedFigure{ZooKeeperMicros: 4700, RaftMicros: 8500, Note: "seed registerTable, one voter"}, prepare: prepareSerialWrite,
		},
		{
			id: "zk.raw-get", title: "raw ZooKeeper get (Go client, no plugin)", group: "raw ZooKeeper", metric: MetricP50,
			note:     "what an operator runs today: a ZooKeeper client in the process, no plugin hop",
			backends: []string{ZooKeeper}, prepare: prepareRawZooKeeper(false),
		},
		{
			id: "zk.raw-write-serial", title: "raw ZooKeeper write, serial (Go client, no plugin)", group: "raw ZooKeeper", metric: MetricP50,
			note:     "compare with store.write-serial on Raft: the write an operator would otherwise run",
			backends: []string{ZooKeeper}, prepare: prepareRawZooKeeper(true),
		},
		{
			id: "store.write-16", title: "write throughput, 16 clients", group: "writes", metric: MetricThroughput,
			prepare: prepareThroughput(16),
		},
		{
			id: "zk.raw-write-16", title: "raw ZooKeeper write throughput, 16 clients (Go client, no plugin)", group: "raw ZooKeeper", metric: MetricThroughput,
			note:     "the ensemble's own CPU per acknowledged write, beside store.write-16's on Raft: an efficiency comparison that does not depend on the machine's cores",
			backends: []string{ZooKeeper}, prepare: prepareRawZooKeeperThroughput(16),
		},
		{
			id: "store.write-64", coordinator: true, title: "write throughput, 64 clients", group: "writes", metric: MetricThroughput,
			note:    "with a coordinator leading: its image follows every write through its watch across the plugin, as in production",
			prepare: prepareThroughput(64),
		},
		{
			id: "election.sigkill", title: "leader election after SIGKILL (3 members)", group: "election", metric: MetricP50,
			note:    electionNote,
			prepare: prepareElection(3),
		},
		{
			id: "election.sigkill-5", title: "leader election after SIGKILL (5 members)", group: "election", metric: MetricP50,
			note:    electionNote,
			prepare: prepareElection(5),
		},
	}
}

// openClient opens one client and registers its Close with the workload.
func openClient(ctx context.Context, s *System, name string) (core.MetadataBackend, error) {
	if s.NewClient == nil {
		return nil, s.missing("client")
	}
	c, err := s.NewClient(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("open client: %w", err)
	}
	return c, nil
}

// ensureNode creates path (and parents) with data, or sets it when it
// exists.
func ensureNode(ctx context.Context, c core.MetadataBackend, path string, data []byte) error {
	_, _, err := core.Create(ctx, c, path, data, core.CreateOptions{MakeParents: true})
	if errors.Is(err, core.ErrNodeExists) {
		_, err = core.Set(ctx, c, path, data, core.AnyVersion, core.Fence{})
	}
	return err
}

func value(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

func prepareStoreGet(ctx context.Context, s *System, p plan) (*workload, error) {
	c, err := openClient(ctx, s, "bench-get")
	if err != nil {
		return nil, err
	}
	path := benchRoot + "/get/key"
	if err := ensureNode(ctx, c, path, value(256)); err != nil {
		c.Close()
		return nil, fmt.Errorf("seed %s: %w", path, err)
	}
	// Warm the path (connections, caches).
	for i := 0; i < 20; i++ {
		if _, err := core.Get(ctx, c, path); err != nil {
			c.Close()
			return nil, err
		}
	}
	return &workload{
		op: func(ctx context.Context, _, _ int) (int64, error) {
			_, err := core.Get(ctx, c, path)
			return 1, err
		},
		close: func() { c.Close() },
	}, nil
}

func prepareSerialWrite(ctx context.Context, s *System, p plan) (*workload, error) {
	c, err := openClient(ctx, s, "bench-write")
	if err != nil {
		return nil, err
	}
	path := benchRoot + "/write/serial"
	data := value(128)
	if err := ensureNode(ctx, c, path, data); err != nil {
		c.Close()
		return nil, fmt.Errorf("seed %s: %w", path, err)
	}
	return &workload{
		op: func(ctx context.Context, _, _ int) (int64, error) {
			_, err := core.Set(ctx, c, path, data, core.AnyVersion, core.Fence{})
			return 1, err
		},
		// Each write is a durable append: keep the batch small.
		calls: p.batch / 4,
		close: func() { c.Close() },
	}, nil
}

func prepareThroughput(clients int) func(ctx context.Context, s *System, p plan) (*workload, error) {
	return func(ctx context.Context, s *System, p plan) (*workload, error) {
		cs := make([]core.MetadataBackend, 0, clients)
		closeAll := func() {
			for _, c := range cs {
				c.Close()
			}
		}
		data := value(128)
		paths := make([]string, clients)
		for k := 0; k < clients; k++ {
			c, err := openClient(ctx, s, fmt.Sprintf("bench-tp-%d", k))
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("client %d of %d: %w", k+1, clients, err)
			}
			cs = append(cs, c)
			paths[k] = fmt.Sprintf("%s/throughput/c%d/k%d", benchRoot, clients, k)
			if err := ensureNode(ctx, c, paths[k], data); err != nil {
				closeAll()
				return nil, fmt.Errorf("seed %s: %w", paths[k], err)
			}
		}
		return &workload{
			op: func(ctx context.Context, k, _ int) (int64, error) {
				_, err := core.Set(ctx, cs[k], paths[k], data, core.AnyVersion, core.Fence{})
				return 1, err
			},
			workers: clients,
			calls:   p.throughputOps,
			memory:  true,
			close:   closeAll,
		}, nil
	}
}

func prepareIDs(block int64) func(ctx context.Context, s *System, p plan) (*workload, error) {
	return func(ctx context.Context, s *System, p plan) (*workload, error) {
		c, err := openClient(ctx, s, fmt.Sprintf("bench-ids-%d", block))
		if err != nil {
			return nil, err
		}
		path := fmt.Sprintf("%s/ids/block-%d", benchRoot, block)
		a := core.NewBlockAllocator(c, path, block)
		if _, err := a.Next(ctx, 1, core.Fence{}); err != nil {
			c.Close()
			return nil, fmt.Errorf("first id from %s: %w", path, err)
		}
		// Enough calls per round to span several blocks, so the mean per
		// id averages over block reservations rather than catching one.
		calls := max(p.batch*5, int(5*block))
		if block == 1 {
			calls = p.batch / 4
		}
		return &workload{
			op: func(ctx context.Context, _, _ int) (int64, error) {
				_, err := a.Next(ctx, 1, core.Fence{})
				return 1, err
			},
			calls: calls,
			close: func() { c.Close() },
		}, nil
	}
}

// coordinator returns the system's coordinator rig or why it has none.
func coordinatorOf(s *System) (CoordinatorRig, error) {
	if s.Coordinator == nil {
		return nil, s.missing("coordinator")
	}
	return s.Coordinator, nil
}

// benchDB is the database the admin rows work in.
const benchDB = "bench"

var dbOnce sync.Map // system name -> error

func ensureDB(ctx context.Context, s *System, a AdminAPI) error {
	if v, ok := dbOnce.Load(s.Name); ok && v == nil {
		return nil
	}
	err := a.CreateDatabase(ctx, benchDB)
	if err != nil && !errors.Is(err, core.ErrNodeExists) {
		return fmt.Errorf("create database %s: %w", benchDB, err)
	}
	dbOnce.Store(s.Name, nil)
	return nil
}

// readyTable creates a table for the read rows.
func readyTable(ctx context.Context, s *System, name string, partitioned bool) (AdminAPI, error) {
	co, err := coordinatorOf(s)
	if err != nil {
		return nil, err
	}
	a := co.Admin()
	if err := ensureDB(ctx, s, a); err != nil {
		return nil, err
	}
	if err := a.CreateTable(ctx, benchDB, name, partitioned); err != nil && !errors.Is(err, core.ErrNodeExists) {
		return nil, fmt.Errorf("create table %s.%s: %w", benchDB, name, err)
	}
	return a, nil
}

func prepareImageRead(ctx context.Context, s *System, p plan) (*workload, error) {
	if _, err := readyTable(ctx, s, "image_read", false); err != nil {
		return nil, err
	}
	co := s.Coordinator
	// The image follows the store asynchronously: wait (bounded) until
	// the table shows.
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := co.ImageGetTable(benchDB, "image_read")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("table not in the image after 60s: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return &workload{
		op: func(ctx context.Context, _, _ int) (int64, error) {
			return 1, co.ImageGetTable(benchDB, "image_read")
		},
		calls: p.batch * 10,
	}, nil
}

func prepareImageNode(ctx context.Context, s *System, p plan) (*workload, error) {
	w, err := prepareImageRead(ctx, s, p)
	if err != nil {
		return nil, err
	}
	co := s.Coordinator
	w.op = func(ctx context.Context, _, _ int) (int64, error) {
		return 1, co.ImageGetNode(benchDB, "image_read")
	}
	return w, nil
}

func prepareGetTableInfo(ctx context.Context, s *System, p plan) (*workload, error) {
	a, err := readyTable(ctx, s, "info", false)
	if err != nil {
		return nil, err
	}
	return &workload{op: func(ctx context.Context, _, _ int) (int64, error) {
		return 1, a.GetTableInfo(ctx, benchDB, "info")
	}}, nil
}

// listDB holds a fixed number of tables for the listTables row (the bench
// database grows as the DDL rows create tables).
const (
	listDB     = "bench_list"
	listTables = 20
)

func prepareListTables(ctx context.Context, s *System, p plan) (*workload, error) {
	co, err := coordinatorOf(s)
	if err != nil {
		return nil, err
	}
	a := co.Admin()
	if err := a.CreateDatabase(ctx, listDB); err != nil && !errors.Is(err, core.ErrNodeExists) {
		return nil, fmt.Errorf("create database %s: %w", listDB, err)
	}
	for i := 0; i < listTables; i++ {
		name := fmt.Sprintf("t%02d", i)
		if err := a.CreateTable(ctx, listDB, name, false); err != nil && !errors.Is(err, core.ErrNodeExists) {
			return nil, fmt.Errorf("create table %s.%s: %w", listDB, name, err)
		}
	}
	return &workload{op: func(ctx context.Context, _, _ int) (int64, error) {
		n, err := a.ListTables(ctx, listDB)
		if err == nil && n != listTables {
			err = fmt.Errorf("listTables %s: %d tables, want %d", listDB, n, listTables)
		}
		return 1, err
	}}, nil
}

func prepareListPartitions(ctx context.Context, s *System, p plan) (*workload, error) {
	const table = "parts1000"
	a, err := readyTable(ctx, s, table, true)
	if err != nil {
		return nil, err
	}
	// A slow machine is no reason to give up: create what is missing, wait
	// (bounded) for the coordinator's listing to show it, and try again a
	// few times. Only an error from a create, or partitions that never
	// show, make the row unavailable.
	var n int
	for attempt := 1; attempt <= 3; attempt++ {
		if n, err = a.ListPartitionInfos(ctx, benchDB, table); err != nil {
			return nil, fmt.Errorf("list partitions: %w", err)
		}
		if n >= p.partitions {
			break
		}
		if err := createPartitions(ctx, a, table, p.partitions); err != nil {
			return nil, err
		}
		// The listing is served from the leader's image, which follows the
		// store asynchronously: wait while it grows (at most 30s), and go
		// round again when it has stopped growing short of the count.
		deadline := time.Now().Add(30 * time.Second)
		grew := time.Now()
		for n < p.partitions && time.Now().Before(deadline) && time.Since(grew) < 2*time.Second && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			prev := n
			if n, err = a.ListPartitionInfos(ctx, benchDB, table); err != nil {
				return nil, fmt.Errorf("list partitions: %w", err)
			}
			if n > prev {
				grew = time.Now()
			}
		}
		if n >= p.partitions {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("preparing %d partitions: %w (%d ready)", p.partitions, err, n)
	}
	if n < p.partitions {
		return nil, fmt.Errorf("table has %d partitions after three rounds of setup, want %d", n, p.partitions)
	}
	return &workload{
		op: func(ctx context.Context, _, _ int) (int64, error) {
			_, err := a.ListPartitionInfos(ctx, benchDB, table)
			return 1, err
		},
		calls: p.batch / 10,
	}, nil
}

// createPartitions creates partitions p0000..p<count-1> of table, 16 at a
// time. Partitions that exist already are fine, so a retry fills whatever
// gaps an earlier round left.
func createPartitions(ctx context.Context, a AdminAPI, table string, count int) error {
	work := make(chan int)
	errc := make(chan error, 16)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				err := a.CreatePartition(ctx, benchDB, table, fmt.Sprintf("p%04d", i))
				if err != nil && !errors.Is(err, core.ErrNodeExists) {
					select {
					case errc <- fmt.Errorf("create partition p%04d: %w", i, err):
					default:
					}
				}
			}
		}()
	}
	var stop error
feed:
	for i := 0; i < count; i++ {
		select {
		case work <- i:
		case <-ctx.Done():
			stop = ctx.Err()
			break feed
		case err := <-errc:
			stop = err
			break feed
		}
	}
	close(work)
	wg.Wait()
	if stop != nil {
		return stop
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

func prepareCreateTable(ctx context.Context, s *System, p plan) (*workload, error) {
	a, err := readyTable(ctx, s, "warm_create", false)
	if err != nil {
		return nil, err
	}
	return &workload{
		op: func(ctx context.Context, _, _ int) (int64, error) {
			return 1, a.CreateTable(ctx, benchDB, nextName("ct_"), false)
		},
		calls: p.batch / 10,
	}, nil
}

func prepareDropTable(ctx context.Context, s *System, p plan) (*workload, error) {
	a, err := readyTable(ctx, s, "warm_drop", false)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	pending := map[int]string{}
	return &workload{
		pre: func(ctx context.Context, k, i int) error {
			name := nextName("dt_")
			if err := a.CreateTable(ctx, benchDB, name, false); err != nil {
				return err
			}
			mu.Lock()
			pending[k] = name
			mu.Unlock()
			return nil
		},
		op: func(ctx context.Context, k, _ int) (int64, error) {
			mu.Lock()
			name := pending[k]
			mu.Unlock()
			return 1, a.DropTable(ctx, benchDB, name)
		},
		calls: p.batch / 20,
	}, nil
}

func prepareCreatePartition(ctx context.Context, s *System, p plan) (*workload, error) {
	a, err := readyTable(ctx, s, "parts_create", true)
	if err != nil {
		return nil, err
	}
	return &workload{
		op: func(ctx context.Context, _, _ int) (int64, error) {
			return 1, a.CreatePartition(ctx, benchDB, "parts_create", nextName("p"))
		},
		calls: p.batch / 10,
	}, nil
}

const electionNote = "from the SIGKILL of the leader coordinator's member (its plugin process) until another coordinator's admin API answered as leader; the result lists every kill and the phases"

// prepareElection starts n candidate coordinators on n members of their
// own; each call kills the leader's member and times the election. The
// members live for one batch: new ones are started before each batch and
// stopped after it (prepare starts and stops a first set, to find out
// whether the row can run), so the other rows never run beside the idle
// members and their coordinators.
func prepareElection(n int) func(ctx context.Context, s *System, p plan) (*workload, error) {
	return func(ctx context.Context, s *System, p plan) (*workload, error) {
		if s.Election == nil {
			return nil, s.missing("election")
		}
		e, err := s.Election(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("start the candidates: %w", err)
		}
		var mu sync.Mutex
		var kills []ElectionKill
		stop := func() {
			if e != nil {
				e.Close()
				e = nil
			}
		}
		stop()
		return &workload{
			begin: func(ctx context.Context) error {
				if e != nil {
					return nil
				}
				var err error
				if e, err = s.Election(ctx, n); err != nil {
					return fmt.Errorf("start the candidates: %w", err)
				}
				return nil
			},
			end: stop,
			timed: func(ctx context.Context, _ int) (time.Duration, error) {
				k, err := e.KillLeaderAndWait(ctx)
				if err != nil {
					return 0, err
				}
				mu.Lock()
				kills = append(kills, k)
				mu.Unlock()
				return time.Duration(k.TotalMicros * 1e3), nil
			},
			calls:   p.elections,
			listAll: true,
			detail: func(res *Result) {
				mu.Lock()
				defer mu.Unlock()
				res.Election = summarizeElections(n, append([]ElectionKill(nil), kills...))
			},
			close: stop,
		}, nil
	}
}

// prepareRawZooKeeper times a Go ZooKeeper client talking to the ensemble
// directly, without the plugin: a 256-byte get, or a 128-byte set.
func prepareRawZooKeeper(write bool) func(ctx context.Context, s *System, p plan) (*workload, error) {
	return func(ctx context.Context, s *System, p plan) (*workload, error) {
		if s.ZooKeeperAddress == "" {
			return nil, fmt.Errorf("no ZooKeeper ensemble on %s", s.Name)
		}
		conn, err := rawZooKeeperSession(ctx, s.ZooKeeperAddress)
		if err != nil {
			return nil, err
		}
		path, size := "/metaplane-bench-raw-get", 256
		if write {
			path, size = "/metaplane-bench-raw-write", 128
		}
		data := value(size)
		if _, err := conn.Create(path, data, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			conn.Close()
			return nil, fmt.Errorf("create %s: %w", path, err)
		}
		w := &workload{close: conn.Close}
		if write {
			w.op = func(context.Context, int, int) (int64, error) {
				_, err := conn.Set(path, data, -1)
				return 1, err
			}
			w.calls = p.batch / 4
		} else {
			w.op = func(context.Context, int, int) (int64, error) {
				_, _, err := conn.Get(path)
				return 1, err
			}
		}
		return w, nil
	}
}

// rawZooKeeperSession opens a go-zookeeper connection to the ensemble and
// waits for its session.
func rawZooKeeperSession(ctx context.Context, addr string) (*zk.Conn, error) {
	conn, events, err := zk.Connect(strings.Split(addr, ","), 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(discardLogger{}))
	if err != nil {
		return nil, err
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn, nil
			}
		case <-deadline:
			conn.Close()
			return nil, errors.New("raw ZooKeeper client: no session within 30s")
		case <-ctx.Done():
			conn.Close()
			return nil, ctx.Err()
		}
	}
}

// prepareRawZooKeeperThroughput is store.write-N's workload from N raw
// ZooKeeper clients, each with its own session and node, in the bench
// process: the CPU per write the runner measures is the ensemble's (and
// the clients'), with no plugin or coordinator in the path.
func prepareRawZooKeeperThroughput(clients int) func(ctx context.Context, s *System, p plan) (*workload, error) {
	return func(ctx context.Context, s *System, p plan) (*workload, error) {
		if s.ZooKeeperAddress == "" {
			return nil, fmt.Errorf("no ZooKeeper ensemble on %s", s.Name)
		}
		conns := make([]*zk.Conn, 0, clients)
		closeAll := func() {
			for _, c := range conns {
				c.Close()
			}
		}
		data := value(128)
		paths := make([]string, clients)
		for k := 0; k < clients; k++ {
			c, err := rawZooKeeperSession(ctx, s.ZooKeeperAddress)
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("raw client %d of %d: %w", k+1, clients, err)
			}
			conns = append(conns, c)
			paths[k] = fmt.Sprintf("/metaplane-bench-raw-throughput-%d", k)
			if _, err := c.Create(paths[k], data, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				closeAll()
				return nil, fmt.Errorf("create %s: %w", paths[k], err)
			}
		}
		return &workload{
			op: func(_ context.Context, k, _ int) (int64, error) {
				_, err := conns[k].Set(paths[k], data, -1)
				return 1, err
			},
			workers: clients,
			calls:   p.throughputOps,
			memory:  true, // its CPU per write (and the servers' peak memory under it)
			close:   closeAll,
		}, nil
	}
}

// discardLogger drops the ZooKeeper library's log lines.
type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}
