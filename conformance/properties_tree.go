package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/metaplane/metaplane/core"
)

// invalidPathEverywhere checks that every call taking a path refuses bad
// with ErrInvalidPath and changes nothing.
func invalidPathEverywhere(e *env, bad string) {
	e.t.Helper()
	c, ctx := e.c0, e.ctx
	before, err := c.Snapshot(ctx, base)
	e.ok(err, "snapshot before")
	_, _, err = core.Create(ctx, c, bad, []byte("x"), core.CreateOptions{})
	e.is(err, core.ErrInvalidPath, "create %q", bad)
	_, _, err = core.Create(ctx, c, bad, []byte("x"), core.CreateOptions{MakeParents: true})
	e.is(err, core.ErrInvalidPath, "create %q with parents", bad)
	_, err = core.Set(ctx, c, bad, []byte("x"), core.AnyVersion, core.Fence{})
	e.is(err, core.ErrInvalidPath, "set %q", bad)
	err = core.Delete(ctx, c, bad, core.AnyVersion, core.Fence{})
	e.is(err, core.ErrInvalidPath, "delete %q", bad)
	_, err = core.Get(ctx, c, bad)
	e.is(err, core.ErrInvalidPath, "get %q", bad)
	_, _, err = c.Children(ctx, bad, core.ReadOptions{})
	e.is(err, core.ErrInvalidPath, "children %q", bad)
	_, err = c.Snapshot(ctx, bad)
	e.is(err, core.ErrInvalidPath, "snapshot %q", bad)
	_, err = c.Watch(ctx, bad, 0)
	e.is(err, core.ErrInvalidPath, "watch %q", bad)
	_, err = c.Txn(ctx, []core.Op{core.CheckOp(base, core.AnyVersion), core.CreateOp(bad, nil, core.Persistent)}, core.TxnOptions{})
	e.is(err, core.ErrInvalidPath, "txn creating %q", bad)
	if i := core.FailedOpIndex(err); i != 1 {
		e.t.Fatalf("txn creating %q: failing index %d, want 1", bad, i)
	}
	after, err := c.Snapshot(ctx, base)
	e.ok(err, "snapshot after")
	if len(after.Nodes) != len(before.Nodes) {
		e.t.Fatalf("refused writes of %q changed the tree: %d nodes before, %d after", bad, len(before.Nodes), len(after.Nodes))
	}
}

func pathProperties() []Property {
	invalid := func(name, path, why string) Property {
		return Property{
			Name:        "Path/Invalid/" + name,
			Description: "a path " + why + " is refused with ErrInvalidPath by every call, and nothing changes",
			run:         func(e *env) { invalidPathEverywhere(e, path) },
		}
	}
	return []Property{
		{
			Name:        "Path/Valid/Accepted",
			Description: "well-formed paths (dashes, dots inside names, underscores, digits, non-ASCII letters, deep nesting) are accepted and read back",
			run: func(e *env) {
				for _, path := range []string{p("a"), p("a-b_c.d"), p("a", "0"), p("a", "..."), p("é"), p("a", "b", "c", "d", "e")} {
					_, _, err := core.Create(e.ctx, e.c0, path, []byte(path), core.CreateOptions{MakeParents: true})
					e.ok(err, "create %q", path)
					e.data(e.c0, path, []byte(path))
				}
			},
		},
		invalid("Empty", "", "that is empty"),
		invalid("Relative", "conformance/a", "without a leading slash"),
		invalid("TrailingSlash", p("a")+"/", "with a trailing slash"),
		invalid("EmptySegment", base+"//a", "with an empty segment"),
		invalid("DotSegment", p(".", "a"), "with a \".\" segment"),
		invalid("DotDotSegment", p("a", ".."), "with a \"..\" segment"),
		invalid("NUL", p("a\x00b"), "with a NUL character"),
		invalid("ControlCharacter", p("a\x01b"), "with a control character"),
		{
			Name:        "Path/Invalid/GetManyPerEntry",
			Description: "GetMany reports a malformed path in its entry's Err (ErrInvalidPath), not as the call's error, and still answers the other entries",
			run: func(e *env) {
				e.create(e.c0, p("ok"), []byte("v"), core.Persistent)
				res, err := e.c0.GetMany(e.ctx, []string{p("ok"), "bad", p("ok")}, core.ReadOptions{})
				e.ok(err, "getmany")
				if len(res) != 3 {
					e.t.Fatalf("getmany of 3 paths returned %d results", len(res))
				}
				e.is(res[1].Err, core.ErrInvalidPath, "entry 1")
				for _, i := range []int{0, 2} {
					if res[i].Err != nil || string(res[i].Node.Data) != "v" {
						e.t.Fatalf("entry %d: %q, %v; want \"v\"", i, res[i].Node.Data, res[i].Err)
					}
				}
			},
		},
		{
			Name:        "Path/Root/Exists",
			Description: "the root / always exists, lists its children, and cannot be created again (ErrNodeExists)",
			run: func(e *env) {
				e.mustExist(e.c0, "/")
				names, _, err := e.c0.Children(e.ctx, "/", core.ReadOptions{})
				e.ok(err, "children /")
				found := false
				for _, n := range names {
					found = found || n == strings.TrimPrefix(base, "/")
				}
				if !found {
					e.t.Fatalf("children of / are %v, want them to include %s", names, base)
				}
				_, _, err = core.Create(e.ctx, e.c0, "/", nil, core.CreateOptions{})
				e.is(err, core.ErrNodeExists, "create /")
			},
		},
	}
}

var tenDigits = regexp.MustCompile(`^[0-9]{10}$`)

// seqSuffix returns the 10-digit suffix of a sequential node created from
// prefix, failing if it has none.
func seqSuffix(e *env, prefix, got string) string {
	e.t.Helper()
	if !strings.HasPrefix(got, prefix) {
		e.t.Fatalf("sequential create of %s made %s, want that prefix", prefix, got)
	}
	suf := strings.TrimPrefix(got, prefix)
	if !tenDigits.MatchString(suf) {
		e.t.Fatalf("sequential create of %s made %s: suffix %q is not 10 zero-padded digits", prefix, got, suf)
	}
	return suf
}

func createProperties() []Property {
	return []Property{
		{
			Name:        "Create/Persistent/ReadBack",
			Description: "a persistent node reads back with its data and a fresh stat: version 0, its data length, no owner, no children, equal create and modify revisions, plausible times",
			run: func(e *env) {
				e.create(e.c0, p("n"), []byte("hello"), core.Persistent)
				n := e.data(e.client(), p("n"), []byte("hello"))
				st := n.Stat
				if st.Version != 0 || st.DataLength != 5 || st.EphemeralOwner != 0 || st.NumChildren != 0 {
					e.t.Fatalf("stat %+v: want version 0, data length 5, owner 0, no children", st)
				}
				if st.CreateRevision <= 0 || st.ModifyRevision != st.CreateRevision {
					e.t.Fatalf("stat %+v: want create revision > 0 and equal to modify revision", st)
				}
				now := time.Now().UnixMilli()
				if d := now - st.CreateTime; d < -int64(time.Hour/time.Millisecond) || d > int64(24*time.Hour/time.Millisecond) || st.ModifyTime != st.CreateTime {
					e.t.Fatalf("stat times %d/%d are not milliseconds near now (%d)", st.CreateTime, st.ModifyTime, now)
				}
			},
		},
		{
			Name:        "Create/Persistent/AlreadyExists",
			Description: "creating an existing node fails with ErrNodeExists and leaves its data and version unchanged",
			run: func(e *env) {
				e.create(e.c0, p("n"), []byte("one"), core.Persistent)
				_, _, err := core.Create(e.ctx, e.c0, p("n"), []byte("two"), core.CreateOptions{})
				e.is(err, core.ErrNodeExists, "second create")
				n := e.data(e.c0, p("n"), []byte("one"))
				if n.Stat.Version != 0 {
					e.t.Fatalf("version %d after a refused create, want 0", n.Stat.Version)
				}
			},
		},
		{
			Name:        "Create/Persistent/SurvivesClose",
			Description: "a persistent node outlives the client (and session) that created it",
			run: func(e *env) {
				c := e.client()
				e.create(c, p("n"), []byte("x"), core.Persistent)
				e.ok(c.Close(), "close")
				e.data(e.c0, p("n"), []byte("x"))
			},
		},
		{
			Name:        "Create/EmptyData",
			Description: "a node created with no data reads back with empty data and data length 0",
			run: func(e *env) {
				e.create(e.c0, p("n"), nil, core.Persistent)
				n := e.get(e.c0, p("n"))
				if len(n.Data) != 0 || n.Stat.DataLength != 0 {
					e.t.Fatalf("got %q (length %d), want empty", n.Data, n.Stat.DataLength)
				}
			},
		},
		{
			Name:        "Create/NoParent",
			Description: "creating a node whose parent is missing fails with ErrNoParent and creates nothing",
			run: func(e *env) {
				_, _, err := core.Create(e.ctx, e.c0, p("missing", "child"), nil, core.CreateOptions{})
				e.is(err, core.ErrNoParent, "create under a missing parent")
				e.mustNotExist(e.c0, p("missing"))
			},
		},
		{
			Name:        "Create/MakeParents",
			Description: "MakeParents creates every missing ancestor as an empty persistent node, in the same transaction",
			run: func(e *env) {
				path := p("a", "b", "c")
				_, _, err := core.Create(e.ctx, e.c0, path, []byte("leaf"), core.CreateOptions{MakeParents: true, Mode: core.Ephemeral})
				e.ok(err, "create with parents")
				for _, anc := range []string{p("a"), p("a", "b")} {
					n := e.get(e.c0, anc)
					if len(n.Data) != 0 || n.Stat.EphemeralOwner != 0 || n.Stat.NumChildren != 1 {
						e.t.Fatalf("ancestor %s: data %q, owner %d, %d children; want empty, persistent, 1 child", anc, n.Data, n.Stat.EphemeralOwner, n.Stat.NumChildren)
					}
				}
				e.data(e.c0, path, []byte("leaf"))
				a, b := e.get(e.c0, p("a")), e.get(e.c0, path)
				if a.Stat.CreateRevision != b.Stat.CreateRevision {
					e.t.Fatalf("parent created at revision %d, leaf at %d: want one transaction", a.Stat.CreateRevision, b.Stat.CreateRevision)
				}
			},
		},
		{
			Name:        "Create/MakeParents/ExistingUntouched",
			Description: "MakeParents leaves existing ancestors' data and versions alone",
			run: func(e *env) {
				e.create(e.c0, p("a"), []byte("keep"), core.Persistent)
				e.set(e.c0, p("a"), []byte("keep"), 0)
				_, _, err := core.Create(e.ctx, e.c0, p("a", "b", "c"), nil, core.CreateOptions{MakeParents: true})
				e.ok(err, "create with parents")
				n := e.data(e.c0, p("a"), []byte("keep"))
				if n.Stat.Version != 1 {
					e.t.Fatalf("existing parent's version %d, want 1", n.Stat.Version)
				}
			},
		},
		{
			Name:        "Create/Ephemeral/OwnedBySession",
			Description: "an ephemeral node's EphemeralOwner is the creating client's session id",
			run: func(e *env) {
				e.create(e.c0, p("e"), nil, core.Ephemeral)
				n := e.get(e.client(), p("e"))
				if id := e.c0.Session().ID; n.Stat.EphemeralOwner != id || id == 0 {
					e.t.Fatalf("ephemeral owner %#x, want the session id %#x (non-zero)", n.Stat.EphemeralOwner, id)
				}
			},
		},
		{
			Name:        "Create/Ephemeral/NoChildren",
			Description: "an ephemeral node cannot have children: creating one fails with ErrNoParent",
			run: func(e *env) {
				e.create(e.c0, p("e"), nil, core.Ephemeral)
				_, _, err := core.Create(e.ctx, e.c0, p("e", "child"), nil, core.CreateOptions{})
				e.is(err, core.ErrNoParent, "child of an ephemeral")
				_, _, err = core.Create(e.ctx, e.c0, p("e", "x", "y"), nil, core.CreateOptions{MakeParents: true})
				e.is(err, core.ErrNoParent, "grandchild of an ephemeral with MakeParents")
				e.mustNotExist(e.c0, p("e", "x"))
			},
		},
		{
			Name:        "Create/Sequential/TenDigitSuffix",
			Description: "a sequential create appends a 10-digit, zero-padded suffix to the name and returns the actual path",
			run: func(e *env) {
				got := e.create(e.c0, p("s-"), []byte("x"), core.PersistentSequential)
				seqSuffix(e, p("s-"), got)
				e.data(e.c0, got, []byte("x"))
				e.mustNotExist(e.c0, p("s-"))
			},
		},
		{
			Name:        "Create/Sequential/Increasing",
			Description: "successive sequential creates under one parent get strictly increasing suffixes, shared across name prefixes",
			run: func(e *env) {
				e.create(e.c0, p("q"), nil, core.Persistent)
				last := ""
				for i := 0; i < 6; i++ {
					prefix := p("q", fmt.Sprintf("n%d-", i%2))
					suf := seqSuffix(e, prefix, e.create(e.c0, prefix, nil, core.PersistentSequential))
					if suf <= last {
						e.t.Fatalf("suffix %s after %s: want strictly increasing", suf, last)
					}
					last = suf
				}
			},
		},
		{
			Name:        "Create/Sequential/ConcurrentUnique",
			Description: "sequential creates racing from several clients under one parent all succeed with distinct names",
			run: func(e *env) {
				e.create(e.c0, p("q"), nil, core.Persistent)
				cs := e.clients(4)
				names := make([][]string, len(cs))
				errs := make([]error, len(cs))
				parallel(len(cs), func(i int) {
					for j := 0; j < 10; j++ {
						got, _, err := core.Create(e.ctx, cs[i], p("q", "n-"), nil, core.CreateOptions{Mode: core.PersistentSequential})
						if err != nil {
							errs[i] = err
							return
						}
						names[i] = append(names[i], got)
					}
				})
				seen := map[string]bool{}
				for i, err := range errs {
					e.ok(err, "client %d", i)
					for _, n := range names[i] {
						if seen[n] {
							e.t.Fatalf("two sequential creates made %s", n)
						}
						seen[n] = true
					}
				}
				kids, _, err := e.c0.Children(e.ctx, p("q"), core.ReadOptions{})
				e.ok(err, "children")
				if len(kids) != 40 {
					e.t.Fatalf("%d children, want 40", len(kids))
				}
			},
		},
		{
			Name:        "Create/EphemeralSequential",
			Description: "an ephemeral-sequential node gets the 10-digit suffix and is owned by the session",
			run: func(e *env) {
				got := e.create(e.c0, p("es-"), nil, core.EphemeralSequential)
				seqSuffix(e, p("es-"), got)
				if n := e.get(e.c0, got); n.Stat.EphemeralOwner != e.c0.Session().ID {
					e.t.Fatalf("owner %#x, want session %#x", n.Stat.EphemeralOwner, e.c0.Session().ID)
				}
			},
		},
		{
			Name:        "Create/InvalidMode",
			Description: "a create with an unknown mode fails with ErrInvalidArgument",
			run: func(e *env) {
				_, _, err := core.Create(e.ctx, e.c0, p("n"), nil, core.CreateOptions{Mode: core.CreateMode(42)})
				e.is(err, core.ErrInvalidArgument, "create with mode 42")
				e.mustNotExist(e.c0, p("n"))
			},
		},
	}
}

func readProperties() []Property {
	return []Property{
		{
			Name:        "Read/GetMany/Mixed",
			Description: "GetMany answers one entry per path, in order, mixing found nodes and ErrNotFound entries, with a nil call error",
			run: func(e *env) {
				e.create(e.c0, p("a"), []byte("A"), core.Persistent)
				e.create(e.c0, p("c"), []byte("C"), core.Persistent)
				paths := []string{p("a"), p("b"), p("c"), p("a")}
				res, err := e.client().GetMany(e.ctx, paths, core.ReadOptions{})
				e.ok(err, "getmany")
				if len(res) != len(paths) {
					e.t.Fatalf("%d results for %d paths", len(res), len(paths))
				}
				want := []string{"A", "", "C", "A"}
				for i, r := range res {
					if i == 1 {
						e.is(r.Err, core.ErrNotFound, "entry 1 (%s)", paths[1])
						continue
					}
					if r.Err != nil || string(r.Node.Data) != want[i] || r.Node.Path != paths[i] {
						e.t.Fatalf("entry %d: path %s data %q err %v; want %s %q", i, r.Node.Path, r.Node.Data, r.Err, paths[i], want[i])
					}
				}
				res, err = e.c0.GetMany(e.ctx, nil, core.ReadOptions{})
				e.ok(err, "getmany of no paths")
				if len(res) != 0 {
					e.t.Fatalf("getmany of no paths: %d results", len(res))
				}
			},
		},
		{
			Name:        "Read/GetMany/NoData",
			Description: "a NoData read returns the stat without the data",
			run: func(e *env) {
				e.create(e.c0, p("a"), []byte("data"), core.Persistent)
				res, err := e.c0.GetMany(e.ctx, []string{p("a")}, core.ReadOptions{NoData: true})
				e.ok(err, "getmany")
				if len(res) != 1 || res[0].Err != nil || len(res[0].Node.Data) != 0 || res[0].Node.Stat.DataLength != 4 {
					e.t.Fatalf("NoData read: %+v; want no data and data length 4", res)
				}
			},
		},
		{
			Name:        "Read/Exists",
			Description: "Exists reports presence and the stat, and absence without an error",
			run: func(e *env) {
				e.create(e.c0, p("a"), []byte("xy"), core.Persistent)
				st, ok, err := core.Exists(e.ctx, e.c0, p("a"))
				if err != nil || !ok || st.DataLength != 2 {
					e.t.Fatalf("exists of a present node: %+v %v %v", st, ok, err)
				}
				_, ok, err = core.Exists(e.ctx, e.c0, p("b"))
				if err != nil || ok {
					e.t.Fatalf("exists of a missing node: %v %v; want false, nil", ok, err)
				}
			},
		},
		{
			Name:        "Read/Children/Sorted",
			Description: "Children returns the direct children's names (not paths), sorted, and the parent's stat with NumChildren",
			run: func(e *env) {
				e.create(e.c0, p("d"), nil, core.Persistent)
				for _, n := range []string{"b", "a", "c", "aa", "B"} {
					e.create(e.c0, p("d", n), nil, core.Persistent)
				}
				e.create(e.c0, p("d", "a", "grandchild"), nil, core.Persistent)
				names, st, err := e.c0.Children(e.ctx, p("d"), core.ReadOptions{})
				e.ok(err, "children")
				want := []string{"B", "a", "aa", "b", "c"}
				if fmt.Sprint(names) != fmt.Sprint(want) {
					e.t.Fatalf("children %v, want %v", names, want)
				}
				if st.NumChildren != 5 {
					e.t.Fatalf("NumChildren %d, want 5", st.NumChildren)
				}
				names, _, err = e.c0.Children(e.ctx, p("d", "c"), core.ReadOptions{})
				e.ok(err, "children of a leaf")
				if len(names) != 0 {
					e.t.Fatalf("leaf has children %v", names)
				}
			},
		},
		{
			Name:        "Read/Children/NotFound",
			Description: "Children of a missing node fails with ErrNotFound",
			run: func(e *env) {
				_, _, err := e.c0.Children(e.ctx, p("missing"), core.ReadOptions{})
				e.is(err, core.ErrNotFound, "children of a missing node")
			},
		},
		{
			Name:        "Read/NotFound",
			Description: "Get of a missing node fails with ErrNotFound",
			run: func(e *env) {
				_, err := core.Get(e.ctx, e.c0, p("missing"))
				e.is(err, core.ErrNotFound, "get of a missing node")
			},
		},
		{
			Name:        "Read/OtherClientSeesWrite",
			Description: "once a write has returned, a read from another client sees it (reads are linearizable)",
			run: func(e *env) {
				cs := e.clients(3)
				for i := 0; i < 5; i++ {
					w := cs[i%3]
					val := []byte(fmt.Sprint(i))
					if i == 0 {
						e.create(w, p("n"), val, core.Persistent)
					} else {
						e.set(w, p("n"), val, core.AnyVersion)
					}
					for _, r := range cs {
						e.data(r, p("n"), val)
					}
				}
			},
		},
		{
			Name:        "Read/Stale/Converges",
			Needs:       NeedsStaleReads,
			Description: "a stale read is served and catches up with a write that has returned",
			run: func(e *env) {
				e.create(e.c0, p("n"), []byte("v1"), core.Persistent)
				r := e.client()
				e.eventually("a stale read to see v1", func() bool {
					res, err := r.GetMany(e.ctx, []string{p("n")}, core.ReadOptions{Stale: true})
					return err == nil && len(res) == 1 && res[0].Err == nil && string(res[0].Node.Data) == "v1"
				})
			},
		},
		{
			Name:        "Read/SlicesOwned",
			Description: "the caller may change a slice it passed in after the call, or one it got back, without changing the store",
			run: func(e *env) {
				buf := []byte("orig")
				e.create(e.c0, p("n"), buf, core.Persistent)
				copy(buf, "XXXX")
				n := e.data(e.c0, p("n"), []byte("orig"))
				copy(n.Data, "YYYY")
				paths := []string{p("n")}
				_, err := e.c0.GetMany(e.ctx, paths, core.ReadOptions{})
				e.ok(err, "getmany")
				paths[0] = p("other")
				e.data(e.c0, p("n"), []byte("orig"))
			},
		},
	}
}

func writeProperties() []Property {
	return []Property{
		{
			Name:        "Set/VersionIncrements",
			Description: "each set raises the version by one and the modify revision strictly, and keeps the create revision",
			run: func(e *env) {
				e.create(e.c0, p("n"), nil, core.Persistent)
				first := e.get(e.c0, p("n")).Stat
				prev := first
				for i := 1; i <= 4; i++ {
					st := e.set(e.c0, p("n"), []byte(fmt.Sprint(i)), int64(i-1))
					got := e.get(e.c0, p("n")).Stat
					if st.Version != int64(i) || got.Version != int64(i) {
						e.t.Fatalf("after set %d: returned version %d, read version %d; want %d", i, st.Version, got.Version, i)
					}
					if got.ModifyRevision <= prev.ModifyRevision || got.CreateRevision != first.CreateRevision {
						e.t.Fatalf("after set %d: stat %+v, previous %+v: want a higher modify revision and the same create revision", i, got, prev)
					}
					if got.ModifyTime < prev.ModifyTime {
						e.t.Fatalf("modify time went back: %d after %d", got.ModifyTime, prev.ModifyTime)
					}
					prev = got
				}
			},
		},
		{
			Name:        "Set/BadVersion/Unchanged",
			Description: "a compare-and-set with a stale version fails with ErrBadVersion and leaves data and version unchanged",
			run: func(e *env) {
				e.create(e.c0, p("n"), []byte("a"), core.Persistent)
				e.set(e.c0, p("n"), []byte("b"), 0)
				_, err := core.Set(e.ctx, e.c0, p("n"), []byte("c"), 0, core.Fence{})
				e.is(err, core.ErrBadVersion, "set with stale version 0")
				_, err = core.Set(e.ctx, e.c0, p("n"), []byte("c"), 7, core.Fence{})
				e.is(err, core.ErrBadVersion, "set with future version 7")
				n := e.data(e.c0, p("n"), []byte("b"))
				if n.Stat.Version != 1 {
					e.t.Fatalf("version %d after refused sets, want 1", n.Stat.Version)
				}
			},
		},
		{
			Name:        "Set/AnyVersion",
			Description: "a set with AnyVersion applies whatever the version",
			run: func(e *env) {
				e.create(e.c0, p("n"), nil, core.Persistent)
				e.set(e.c0, p("n"), []byte("x"), core.AnyVersion)
				st := e.set(e.c0, p("n"), []byte("y"), core.AnyVersion)
				if st.Version != 2 {
					e.t.Fatalf("version %d, want 2", st.Version)
				}
				e.data(e.c0, p("n"), []byte("y"))
			},
		},
		{
			Name:        "Set/NotFound",
			Description: "a set of a missing node fails with ErrNotFound and creates nothing",
			run: func(e *env) {
				_, err := core.Set(e.ctx, e.c0, p("n"), []byte("x"), core.AnyVersion, core.Fence{})
				e.is(err, core.ErrNotFound, "set of a missing node")
				e.mustNotExist(e.c0, p("n"))
			},
		},
		{
			Name:        "Delete/Version",
			Description: "a delete with a stale version fails with ErrBadVersion and keeps the node; with the right version it deletes it",
			run: func(e *env) {
				e.create(e.c0, p("n"), nil, core.Persistent)
				e.set(e.c0, p("n"), nil, 0)
				err := core.Delete(e.ctx, e.c0, p("n"), 0, core.Fence{})
				e.is(err, core.ErrBadVersion, "delete with stale version")
				e.mustExist(e.c0, p("n"))
				e.ok(core.Delete(e.ctx, e.c0, p("n"), 1, core.Fence{}), "delete with version 1")
				e.mustNotExist(e.client(), p("n"))
			},
		},
		{
			Name:        "Delete/NotEmpty",
			Description: "deleting a node that has children fails with ErrNotEmpty and deletes nothing",
			run: func(e *env) {
				e.create(e.c0, p("d"), nil, core.Persistent)
				e.create(e.c0, p("d", "c"), nil, core.Persistent)
				err := core.Delete(e.ctx, e.c0, p("d"), core.AnyVersion, core.Fence{})
				e.is(err, core.ErrNotEmpty, "delete of a parent")
				e.mustExist(e.c0, p("d"))
				e.mustExist(e.c0, p("d", "c"))
			},
		},
		{
			Name:        "Delete/NotFound",
			Description: "deleting a missing node fails with ErrNotFound",
			run: func(e *env) {
				err := core.Delete(e.ctx, e.c0, p("n"), core.AnyVersion, core.Fence{})
				e.is(err, core.ErrNotFound, "delete of a missing node")
			},
		},
		{
			Name:        "Delete/Recreate",
			Description: "a node deleted and created again starts over at version 0 with a newer create revision, and its parent's child count follows",
			run: func(e *env) {
				e.create(e.c0, p("n"), []byte("1"), core.Persistent)
				e.set(e.c0, p("n"), []byte("2"), 0)
				old := e.get(e.c0, p("n")).Stat
				e.ok(core.Delete(e.ctx, e.c0, p("n"), core.AnyVersion, core.Fence{}), "delete")
				if _, st, _ := e.c0.Children(e.ctx, base, core.ReadOptions{}); st.NumChildren != 0 {
					e.t.Fatalf("parent has %d children after the delete, want 0", st.NumChildren)
				}
				e.create(e.c0, p("n"), []byte("3"), core.Persistent)
				st := e.data(e.c0, p("n"), []byte("3")).Stat
				if st.Version != 0 || st.CreateRevision <= old.ModifyRevision {
					e.t.Fatalf("recreated stat %+v (old %+v): want version 0 and a newer create revision", st, old)
				}
			},
		},
		{
			Name:        "Limits/ValueSize",
			Description: "a value of exactly MaxValueSize is accepted; one byte more fails with ErrTooLarge on create, set and in a transaction, and changes nothing",
			run: func(e *env) {
				limit := e.maxValueSize()
				exact := bytes.Repeat([]byte("v"), limit)
				over := append(bytes.Repeat([]byte("o"), limit), 'o')
				e.create(e.c0, p("ok"), exact, core.Persistent)
				if n := e.get(e.c0, p("ok")); len(n.Data) != limit || n.Stat.DataLength != int32(limit) {
					e.t.Fatalf("read back %d bytes (stat %d), want %d", len(n.Data), n.Stat.DataLength, limit)
				}
				_, _, err := core.Create(e.ctx, e.c0, p("big"), over, core.CreateOptions{})
				e.is(err, core.ErrTooLarge, "create of %d bytes (limit %d)", len(over), limit)
				e.mustNotExist(e.c0, p("big"))
				_, err = core.Set(e.ctx, e.c0, p("ok"), over, core.AnyVersion, core.Fence{})
				e.is(err, core.ErrTooLarge, "set of %d bytes", len(over))
				_, err = e.c0.Txn(e.ctx, []core.Op{core.CreateOp(p("small"), nil, core.Persistent), core.SetOp(p("ok"), over, core.AnyVersion)}, core.TxnOptions{})
				e.is(err, core.ErrTooLarge, "txn setting %d bytes", len(over))
				if i := core.FailedOpIndex(err); i != 1 {
					e.t.Fatalf("failing index %d, want 1", i)
				}
				e.mustNotExist(e.c0, p("small"))
				if n := e.get(e.c0, p("ok")); n.Stat.Version != 0 || !bytes.Equal(n.Data, exact) {
					e.t.Fatalf("refused sets changed the node: version %d", n.Stat.Version)
				}
			},
		},
		{
			Name:        "Revision/StrictlyIncreasing",
			Description: "writes from different clients get strictly increasing revisions, in the order they returned",
			run: func(e *env) {
				cs := e.clients(3)
				var last int64
				for i := 0; i < 9; i++ {
					path := p(fmt.Sprint("n", i))
					e.create(cs[i%3], path, nil, core.Persistent)
					rev := e.get(cs[(i+1)%3], path).Stat.CreateRevision
					if rev <= last {
						e.t.Fatalf("write %d at revision %d, after revision %d", i, rev, last)
					}
					last = rev
				}
			},
		},
	}
}

func txnProperties() []Property {
	return []Property{
		{
			Name:        "Txn/AllOrNothing",
			Description: "a transaction whose last op fails applies none of its ops: earlier creates, sets and deletes are all undone",
			run: func(e *env) {
				e.create(e.c0, p("keep"), []byte("k"), core.Persistent)
				e.create(e.c0, p("del"), nil, core.Persistent)
				ops := []core.Op{
					core.CreateOp(p("a"), nil, core.Persistent),
					core.SetOp(p("keep"), []byte("changed"), core.AnyVersion),
					core.DeleteOp(p("del"), core.AnyVersion),
					core.CreateOp(p("b", "c"), nil, core.Persistent).WithParents(),
					core.CreateOp(p("keep"), nil, core.Persistent),
				}
				_, err := e.c0.Txn(e.ctx, ops, core.TxnOptions{})
				e.is(err, core.ErrNodeExists, "txn")
				if i := core.FailedOpIndex(err); i != 4 {
					e.t.Fatalf("failing index %d, want 4", i)
				}
				r := e.client()
				e.mustNotExist(r, p("a"))
				e.mustNotExist(r, p("b"))
				e.mustExist(r, p("del"))
				if n := e.data(r, p("keep"), []byte("k")); n.Stat.Version != 0 {
					e.t.Fatalf("version %d after a refused txn, want 0", n.Stat.Version)
				}
			},
		},
		{
			Name:        "Txn/FailingIndex",
			Description: "a refused transaction is a *TxnError naming the failing op's index and wrapping its sentinel",
			run: func(e *env) {
				e.create(e.c0, p("n"), nil, core.Persistent)
				cases := []struct {
					ops   []core.Op
					index int
					want  error
				}{
					{[]core.Op{core.CheckOp(p("n"), 0), core.CheckOp(p("n"), 3)}, 1, core.ErrBadVersion},
					{[]core.Op{core.CheckOp(p("missing"), core.AnyVersion)}, 0, core.ErrNotFound},
					{[]core.Op{core.CheckOp(p("n"), 0), core.SetOp(p("n"), nil, 0), core.DeleteOp(p("missing"), core.AnyVersion)}, 2, core.ErrNotFound},
					{[]core.Op{core.CreateOp(p("x"), nil, core.Persistent), core.CreateOp(p("y", "z"), nil, core.Persistent)}, 1, core.ErrNoParent},
				}
				for i, tc := range cases {
					_, err := e.c0.Txn(e.ctx, tc.ops, core.TxnOptions{})
					e.is(err, tc.want, "case %d", i)
					var te *core.TxnError
					if !errors.As(err, &te) || te.Index != tc.index {
						e.t.Fatalf("case %d: error %v: want a *core.TxnError with index %d", i, err, tc.index)
					}
				}
				if n := e.get(e.c0, p("n")); n.Stat.Version != 0 {
					e.t.Fatalf("version %d after refused txns, want 0", n.Stat.Version)
				}
			},
		},
		{
			Name:        "Txn/SeesEarlierOps",
			Description: "ops see the effects of earlier ops in the same transaction (create a parent then its child, set then check the new version)",
			run: func(e *env) {
				ops := []core.Op{
					core.CreateOp(p("p"), []byte("parent"), core.Persistent),
					core.CreateOp(p("p", "c"), []byte("c0"), core.Persistent),
					core.SetOp(p("p", "c"), []byte("c1"), 0),
					core.CheckOp(p("p", "c"), 1),
					core.DeleteOp(p("p", "c"), 1),
					core.CreateOp(p("p", "c"), []byte("c2"), core.Persistent),
				}
				_, err := e.c0.Txn(e.ctx, ops, core.TxnOptions{})
				e.ok(err, "txn")
				if n := e.data(e.c0, p("p", "c"), []byte("c2")); n.Stat.Version != 0 {
					e.t.Fatalf("recreated child version %d, want 0", n.Stat.Version)
				}
			},
		},
		{
			Name:        "Txn/Empty",
			Description: "an empty transaction fails with ErrInvalidArgument",
			run: func(e *env) {
				_, err := e.c0.Txn(e.ctx, nil, core.TxnOptions{})
				e.is(err, core.ErrInvalidArgument, "empty txn")
				_, err = e.c0.Txn(e.ctx, []core.Op{}, core.TxnOptions{})
				e.is(err, core.ErrInvalidArgument, "empty txn")
			},
		},
		{
			Name:        "Txn/Results",
			Description: "a transaction's results have one entry per op with its type and actual path (sequential suffix included), and its revision is the revision of its changes",
			run: func(e *env) {
				e.create(e.c0, p("n"), nil, core.Persistent)
				ops := []core.Op{
					core.CreateOp(p("s-"), nil, core.PersistentSequential),
					core.SetOp(p("n"), []byte("v"), 0),
					core.CheckOp(p("n"), 1),
					core.CreateOp(p("gone"), nil, core.Persistent),
					core.DeleteOp(p("gone"), 0),
				}
				res, err := e.c0.Txn(e.ctx, ops, core.TxnOptions{})
				e.ok(err, "txn")
				if len(res.Results) != len(ops) {
					e.t.Fatalf("%d results for %d ops", len(res.Results), len(ops))
				}
				for i, r := range res.Results {
					if r.Type != ops[i].Type {
						e.t.Fatalf("result %d has type %v, want %v", i, r.Type, ops[i].Type)
					}
				}
				seq := res.Results[0].Path
				seqSuffix(e, p("s-"), seq)
				e.mustExist(e.c0, seq)
				if res.Results[1].Path != p("n") || res.Results[1].Stat.Version != 1 {
					e.t.Fatalf("set result %+v: want path %s, version 1", res.Results[1], p("n"))
				}
				n := e.get(e.c0, p("n")).Stat
				s := e.get(e.c0, seq).Stat
				if res.Revision <= 0 || n.ModifyRevision != res.Revision || s.CreateRevision != res.Revision {
					e.t.Fatalf("txn revision %d; set node modified at %d, sequential node created at %d: want all equal", res.Revision, n.ModifyRevision, s.CreateRevision)
				}
			},
		},
		{
			Name:        "Txn/InvalidOp",
			Description: "a transaction with an unknown op type fails with ErrInvalidArgument at that op's index",
			run: func(e *env) {
				ops := []core.Op{core.CreateOp(p("a"), nil, core.Persistent), {Type: core.OpType(99), Path: p("a")}}
				_, err := e.c0.Txn(e.ctx, ops, core.TxnOptions{})
				e.is(err, core.ErrInvalidArgument, "txn with op type 99")
				if i := core.FailedOpIndex(err); i != 1 {
					e.t.Fatalf("failing index %d, want 1", i)
				}
				e.mustNotExist(e.c0, p("a"))
			},
		},
		{
			Name:        "Txn/ConcurrentConflicts",
			Description: "of concurrent transactions that each check the same version and then set, exactly one succeeds",
			run: func(e *env) {
				e.create(e.c0, p("n"), nil, core.Persistent)
				e.create(e.c0, p("log"), nil, core.Persistent)
				cs := e.clients(4)
				errs := make([]error, len(cs))
				parallel(len(cs), func(i int) {
					ops := []core.Op{
						core.CheckOp(p("n"), 0),
						core.SetOp(p("n"), []byte(fmt.Sprint(i)), core.AnyVersion),
						core.CreateOp(p("log", fmt.Sprint(i)), nil, core.Persistent),
					}
					_, errs[i] = cs[i].Txn(e.ctx, ops, core.TxnOptions{})
				})
				won := 0
				for i, err := range errs {
					if err == nil {
						won++
						continue
					}
					e.is(err, core.ErrBadVersion, "losing txn %d", i)
				}
				kids, _, err := e.c0.Children(e.ctx, p("log"), core.ReadOptions{})
				e.ok(err, "children")
				if won != 1 || len(kids) != 1 {
					e.t.Fatalf("%d txns succeeded and %d logged, want exactly 1", won, len(kids))
				}
			},
		},
	}
}
