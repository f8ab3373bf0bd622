package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/adminclient"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

func init() {
	Register(Command{Name: "admin", Summary: "administer the catalog through the coordinator leader (metaplane admin help)", Run: runAdmin})
}

// adminVerb is one `metaplane admin` verb.
type adminVerb struct {
	name    string
	args    string // positional arguments, for usage
	summary string
	flags   func(fs *flag.FlagSet) func(a *adminCtx, pos []string) error
	npos    int // exact number of positional arguments
}

// adminCtx is what a verb runs with.
type adminCtx struct {
	ctx    context.Context
	env    *Env
	client *adminclient.Client
	json   bool
}

func (a *adminCtx) admin(call func(ctx context.Context, c adminv1.AdminServiceClient) error) error {
	return a.client.Admin(a.ctx, call)
}

// print writes m as JSON (--json) or calls text.
func (a *adminCtx) print(m proto.Message, text func(w io.Writer)) error {
	if a.json {
		b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
		if err != nil {
			return err
		}
		// protojson's spacing is deliberately unstable: normalise it.
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "  "); err != nil {
			return err
		}
		out.WriteByte('\n')
		_, err = out.WriteTo(a.env.Stdout)
		return err
	}
	text(a.env.Stdout)
	return nil
}

func (a *adminCtx) done(m proto.Message, format string, args ...any) error {
	return a.print(m, func(w io.Writer) { fmt.Fprintf(w, format+"\n", args...) })
}

var adminVerbs []adminVerb

func init() {
	adminVerbs = []adminVerb{
		{name: "create-database", args: "<db>", summary: "create a database", npos: 1, flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			comment := fs.String("comment", "", "the database's comment")
			ifNot := fs.Bool("if-not-exists", false, "succeed when the database exists already")
			props := kvFlag(fs, "property", "a custom property `key=value` (repeatable)")
			return func(a *adminCtx, pos []string) error {
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: pos[0], Comment: *comment, CustomProperties: *props, IgnoreIfExists: *ifNot})
					if err != nil {
						return err
					}
					return a.done(r, "created database %s", pos[0])
				})
			}
		}},
		{name: "list-databases", summary: "list the databases", flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			return func(a *adminCtx, pos []string) error {
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
					if err != nil {
						return err
					}
					return a.print(r, func(w io.Writer) { printLines(w, r.Names, "(no databases)") })
				})
			}
		}},
		{name: "drop-database", args: "<db>", summary: "drop a database (--cascade: with its tables)", npos: 1, flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			cascade := fs.Bool("cascade", false, "drop the database's tables too")
			ifExists := fs.Bool("if-exists", false, "succeed when the database does not exist")
			return func(a *adminCtx, pos []string) error {
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.DropDatabase(ctx, &adminv1.DropDatabaseRequest{Name: pos[0], Cascade: *cascade, IgnoreIfNotExists: *ifExists})
					if err != nil {
						return err
					}
					return a.done(r, "dropped database %s", pos[0])
				})
			}
		}},
		{name: "create-table", args: "<db>.<table>", summary: "create a table: --column name:TYPE ... [--primary-key c,...] [--buckets N] [--partition-key c]", npos: 1,
			flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
				var cols []*adminv1.Column
				fs.Func("column", "a column `name:TYPE` (repeatable, in order; TYPE like INT, BIGINT, STRING, CHAR(10), DECIMAL(10,2), TIMESTAMP(3), optionally NOT NULL)", func(s string) error {
					name, typ, ok := strings.Cut(s, ":")
					if !ok || strings.TrimSpace(name) == "" || strings.TrimSpace(typ) == "" {
						return fmt.Errorf("column %q: want name:TYPE", s)
					}
					cols = append(cols, &adminv1.Column{Name: strings.TrimSpace(name), Type: strings.TrimSpace(typ)})
					return nil
				})
				pk := fs.String("primary-key", "", "the primary key columns, `c1,c2`")
				pkeys := fs.String("partition-key", "", "the partition key columns, `c1,c2`")
				bkeys := fs.String("bucket-key", "", "the bucket key columns, `c1,c2` (default: the primary key without the partition keys)")
				buckets := fs.Int("buckets", 0, "the number of buckets (default 1)")
				rf := fs.Int("replication-factor", 0, "replicas per bucket (default 3, capped at the registered tablet servers)")
				comment := fs.String("comment", "", "the table's comment")
				props := kvFlag(fs, "property", "a table property `key=value` (repeatable)")
				ifNot := fs.Bool("if-not-exists", false, "succeed when the table exists already")
				return func(a *adminCtx, pos []string) error {
					db, table, err := splitTable(pos[0])
					if err != nil {
						return err
					}
					if len(cols) == 0 {
						return usageError("give at least one --column name:TYPE")
					}
					d := &adminv1.TableDescriptor{Columns: cols, PrimaryKey: splitList(*pk), PartitionKeys: splitList(*pkeys),
						BucketKeys: splitList(*bkeys), BucketCount: int32(*buckets), ReplicationFactor: int32(*rf), Comment: *comment, Properties: *props}
					return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
						r, err := c.CreateTable(ctx, &adminv1.CreateTableRequest{Database: db, Table: table, Descriptor_: d, IgnoreIfExists: *ifNot})
						if err != nil {
							return err
						}
						return a.print(r, func(w io.Writer) {
							fmt.Fprintf(w, "created table %s.%s (id %d, %s)\n", db, table, r.Table.TableId, plural(int(r.Table.Descriptor_.BucketCount), "bucket"))
						})
					})
				}
			}},
		{name: "describe-table", args: "<db>.<table>", summary: "show a table's schema, keys and buckets", npos: 1, flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			return func(a *adminCtx, pos []string) error {
				db, table, err := splitTable(pos[0])
				if err != nil {
					return err
				}
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.GetTableInfo(ctx, &adminv1.GetTableInfoRequest{Database: db, Table: table})
					if err != nil {
						return err
					}
					return a.print(r, func(w io.Writer) { describeTable(w, r.Table) })
				})
			}
		}},
		{name: "list-tables", args: "<db>", summary: "list a database's tables", npos: 1, flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			return func(a *adminCtx, pos []string) error {
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.ListTables(ctx, &adminv1.ListTablesRequest{Database: pos[0]})
					if err != nil {
						return err
					}
					return a.print(r, func(w io.Writer) { printLines(w, r.Names, "(no tables in "+pos[0]+")") })
				})
			}
		}},
		{name: "drop-table", args: "<db>.<table>", summary: "drop a table with its partitions and buckets", npos: 1, flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			ifExists := fs.Bool("if-exists", false, "succeed when the table does not exist")
			return func(a *adminCtx, pos []string) error {
				db, table, err := splitTable(pos[0])
				if err != nil {
					return err
				}
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.DropTable(ctx, &adminv1.DropTableRequest{Database: db, Table: table, IgnoreIfNotExists: *ifExists})
					if err != nil {
						return err
					}
					return a.done(r, "dropped table %s", pos[0])
				})
			}
		}},
		{name: "create-partition", args: "<db>.<table> <partition>", summary: "create a partition of a partitioned table", npos: 2, flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			ifNot := fs.Bool("if-not-exists", false, "succeed when the partition exists already")
			return func(a *adminCtx, pos []string) error {
				db, table, err := splitTable(pos[0])
				if err != nil {
					return err
				}
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.CreatePartition(ctx, &adminv1.CreatePartitionRequest{Database: db, Table: table, Partition: pos[1], IgnoreIfExists: *ifNot})
					if err != nil {
						return err
					}
					return a.done(r, "created partition %s of %s (id %d)", pos[1], pos[0], r.Partition.PartitionId)
				})
			}
		}},
		{name: "list-partitions", args: "<db>.<table>", summary: "list a table's partitions", npos: 1, flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			return func(a *adminCtx, pos []string) error {
				db, table, err := splitTable(pos[0])
				if err != nil {
					return err
				}
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.ListPartitions(ctx, &adminv1.ListPartitionsRequest{Database: db, Table: table})
					if err != nil {
						return err
					}
					return a.print(r, func(w io.Writer) {
						if len(r.Partitions) == 0 {
							fmt.Fprintf(w, "(no partitions in %s)\n", pos[0])
							return
						}
						tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
						fmt.Fprintln(tw, "PARTITION\tID")
						for _, p := range r.Partitions {
							fmt.Fprintf(tw, "%s\t%d\n", p.Name, p.PartitionId)
						}
						tw.Flush()
					})
				})
			}
		}},
		{name: "drop-partition", args: "<db>.<table> <partition>", summary: "drop a partition with its buckets", npos: 2, flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			ifExists := fs.Bool("if-exists", false, "succeed when the partition does not exist")
			return func(a *adminCtx, pos []string) error {
				db, table, err := splitTable(pos[0])
				if err != nil {
					return err
				}
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.DropPartition(ctx, &adminv1.DropPartitionRequest{Database: db, Table: table, Partition: pos[1], IgnoreIfNotExists: *ifExists})
					if err != nil {
						return err
					}
					return a.done(r, "dropped partition %s of %s", pos[1], pos[0])
				})
			}
		}},
		{name: "list-tablet-servers", summary: "list the registered tablet servers", flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			return func(a *adminCtx, pos []string) error {
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.ListTabletServers(ctx, &adminv1.ListTabletServersRequest{})
					if err != nil {
						return err
					}
					return a.print(r, func(w io.Writer) {
						if len(r.Servers) == 0 {
							fmt.Fprintln(w, "(no tablet servers registered)")
							return
						}
						tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
						fmt.Fprintln(tw, "ID\tLISTENERS\tRACK\tREGISTERED")
						for _, s := range r.Servers {
							fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Id, s.Listeners, orDash(s.Rack),
								time.UnixMilli(s.RegisterTimestamp).UTC().Format(time.RFC3339))
						}
						tw.Flush()
					})
				})
			}
		}},
		{name: "allocate-ids", args: "<table|partition|writer>", summary: "reserve a contiguous range of ids from a sequence counter", npos: 1, flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			count := fs.Int64("count", 1, "how many ids")
			return func(a *adminCtx, pos []string) error {
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.AllocateIDs(ctx, &adminv1.AllocateIDsRequest{Counter: pos[0], Count: *count})
					if err != nil {
						return err
					}
					return a.done(r, "%s ids [%d, %d)", pos[0], r.First, r.First+r.Count)
				})
			}
		}},
		{name: "add-acl", args: "<resourceType> <resourceName>", summary: "grant: --principal USER:name --operation OP [--permission ALLOW|DENY] [--host H]", npos: 2, flags: aclFlags(true)},
		{name: "remove-acl", args: "<resourceType> <resourceName>", summary: "remove the matching ACL entries (unset filters match all)", npos: 2, flags: aclFlags(false)},
		{name: "list-acls", summary: "list the ACLs (--resource-type T to filter)", flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			rt := fs.String("resource-type", "", "only this resource type")
			return func(a *adminCtx, pos []string) error {
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.ListACLs(ctx, &adminv1.ListACLsRequest{ResourceType: *rt})
					if err != nil {
						return err
					}
					return a.print(r, func(w io.Writer) {
						if len(r.Resources) == 0 {
							fmt.Fprintln(w, "(no acls)")
							return
						}
						tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
						fmt.Fprintln(tw, "RESOURCE\tPRINCIPAL\tPERMISSION\tOPERATION\tHOST")
						for _, res := range r.Resources {
							for _, e := range res.Acls {
								fmt.Fprintf(tw, "%s:%s\t%s:%s\t%s\t%s\t%s\n", res.ResourceType, res.ResourceName, e.PrincipalType, e.PrincipalName, e.PermissionType, e.Operation, e.Host)
							}
						}
						tw.Flush()
					})
				})
			}
		}},
		{name: "alter-config", summary: "change dynamic server config: --set key=value ... --remove key ...", flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			set := kvFlag(fs, "set", "set `key=value` (repeatable)")
			var remove []string
			fs.Func("remove", "remove `key` (repeatable)", func(s string) error { remove = append(remove, s); return nil })
			return func(a *adminCtx, pos []string) error {
				if len(*set) == 0 && len(remove) == 0 {
					return usageError("alter-config: give --set key=value or --remove key")
				}
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.AlterConfigs(ctx, &adminv1.AlterConfigsRequest{Set: *set, Remove: remove})
					if err != nil {
						return err
					}
					return a.done(r, "altered %d config keys", len(*set)+len(remove))
				})
			}
		}},
		{name: "describe-configs", summary: "show the dynamic server config", flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			return func(a *adminCtx, pos []string) error {
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.DescribeConfigs(ctx, &adminv1.DescribeConfigsRequest{})
					if err != nil {
						return err
					}
					return a.print(r, func(w io.Writer) {
						keys := make([]string, 0, len(r.Configs))
						for k := range r.Configs {
							keys = append(keys, k)
						}
						sort.Strings(keys)
						if len(keys) == 0 {
							fmt.Fprintln(w, "(no dynamic config)")
						}
						for _, k := range keys {
							fmt.Fprintf(w, "%s=%s\n", k, r.Configs[k])
						}
					})
				})
			}
		}},
		{name: "set-server-tag", args: "<id>[,<id>...]", summary: "tag tablet servers (--tag N; --remove to clear)", npos: 1, flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			tag := fs.Int("tag", 0, "the tag (0 or 1 in the original: permanent or temporary offline)")
			remove := fs.Bool("remove", false, "remove the servers' tags")
			return func(a *adminCtx, pos []string) error {
				var ids []int32
				for _, s := range splitList(pos[0]) {
					n, err := strconv.ParseInt(s, 10, 32)
					if err != nil {
						return usageError("set-server-tag: %q is not a tablet server id", s)
					}
					ids = append(ids, int32(n))
				}
				t := int32(*tag)
				if *remove {
					t = -1
				}
				return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
					r, err := c.SetServerTags(ctx, &adminv1.SetServerTagsRequest{ServerIds: ids, Tag: t})
					if err != nil {
						return err
					}
					return a.done(r, "tagged tablet servers %s", pos[0])
				})
			}
		}},
		{name: "leader", summary: "show the coordinator leader (asks the bootstrap servers, no redirect)", flags: func(fs *flag.FlagSet) func(*adminCtx, []string) error {
			return func(a *adminCtx, pos []string) error {
				r, err := a.client.GetLeader(a.ctx)
				if err != nil {
					return err
				}
				return a.print(r, func(w io.Writer) {
					if r.LeaderAddress == "" {
						fmt.Fprintln(w, "no leader known")
						return
					}
					fmt.Fprintf(w, "leader %s at %s, epoch %d (backend %s)\n", r.LeaderId, r.LeaderAddress, r.Epoch, r.Backend)
				})
			}
		}},
	}
}

func aclFlags(add bool) func(fs *flag.FlagSet) func(*adminCtx, []string) error {
	return func(fs *flag.FlagSet) func(*adminCtx, []string) error {
		principal := fs.String("principal", "", "the principal, `TYPE:name` (e.g. USER:alice)")
		op := fs.String("operation", "", "the operation (ALL, READ, WRITE, CREATE, DROP, ALTER, DESCRIBE)")
		perm := fs.String("permission", "", "ALLOW or DENY (add-acl default ALLOW)")
		host := fs.String("host", "", "the host (add-acl default *)")
		return func(a *adminCtx, pos []string) error {
			e := &adminv1.ACLEntry{Operation: strings.ToUpper(*op), PermissionType: strings.ToUpper(*perm), Host: *host}
			if *principal != "" {
				t, n, ok := strings.Cut(*principal, ":")
				if !ok {
					return usageError("--principal %q: want TYPE:name", *principal)
				}
				e.PrincipalType, e.PrincipalName = strings.ToUpper(t), n
			}
			return a.admin(func(ctx context.Context, c adminv1.AdminServiceClient) error {
				if add {
					if e.PermissionType == "" {
						e.PermissionType = "ALLOW"
					}
					if e.Host == "" {
						e.Host = "*"
					}
					if e.PrincipalName == "" || e.Operation == "" {
						return usageError("add-acl: --principal and --operation are required")
					}
					r, err := c.AddACLs(ctx, &adminv1.AddACLsRequest{ResourceType: pos[0], ResourceName: pos[1], Acls: []*adminv1.ACLEntry{e}})
					if err != nil {
						return err
					}
					return a.done(r, "added acl on %s:%s", pos[0], pos[1])
				}
				r, err := c.RemoveACLs(ctx, &adminv1.RemoveACLsRequest{ResourceType: pos[0], ResourceName: pos[1], Filter: e})
				if err != nil {
					return err
				}
				return a.done(r, "removed matching acls on %s:%s", pos[0], pos[1])
			})
		}
	}
}

// usageErr is a command-line mistake found after parsing (exit 2).
type usageErr struct{ msg string }

func (e *usageErr) Error() string { return e.msg }

func usageError(format string, args ...any) error {
	return &usageErr{msg: fmt.Sprintf(format, args...)}
}

func kvFlag(fs *flag.FlagSet, name, usage string) *map[string]string {
	m := map[string]string{}
	fs.Func(name, usage, func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q: want key=value", s)
		}
		m[k] = v
		return nil
	})
	return &m
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func splitTable(s string) (string, string, error) {
	db, table, ok := strings.Cut(s, ".")
	if !ok || db == "" || table == "" {
		return "", "", usageError("%q: want <db>.<table>", s)
	}
	return db, table, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printLines(w io.Writer, lines []string, empty string) {
	if len(lines) == 0 {
		fmt.Fprintln(w, empty)
		return
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

func describeTable(w io.Writer, t *adminv1.TableInfo) {
	d := t.Descriptor_
	fmt.Fprintf(w, "table %s.%s (id %d, schema %d)\n", t.Database, t.Table, t.TableId, t.SchemaId)
	if d.Comment != "" {
		fmt.Fprintf(w, "comment: %s\n", d.Comment)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  COLUMN\tTYPE\tCOMMENT")
	for _, c := range d.Columns {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Name, c.Type, c.Comment)
	}
	tw.Flush()
	fmt.Fprintf(w, "primary key:   %s\n", orDash(strings.Join(d.PrimaryKey, ", ")))
	fmt.Fprintf(w, "partition key: %s\n", orDash(strings.Join(d.PartitionKeys, ", ")))
	fmt.Fprintf(w, "bucket key:    %s\n", orDash(strings.Join(d.BucketKeys, ", ")))
	fmt.Fprintf(w, "buckets:       %d\n", d.BucketCount)
	if len(d.Properties) > 0 {
		keys := make([]string, 0, len(d.Properties))
		for k := range d.Properties {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "property:      %s=%s\n", k, d.Properties[k])
		}
	}
	if len(t.Buckets) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  BUCKET\tREPLICAS\tLEADER\tISR\tCOORDINATOR EPOCH")
		for _, b := range t.Buckets {
			leader := strconv.Itoa(int(b.Leader))
			if b.Leader < 0 {
				leader = "none"
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\n", b.Bucket, ints(b.Replicas), leader, ints(b.Isr), b.CoordinatorEpoch)
		}
		tw.Flush()
	} else if len(d.PartitionKeys) > 0 {
		fmt.Fprintln(w, "(partitioned: buckets are per partition)")
	}
}

func ints(v []int32) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(int(n))
	}
	return "[" + strings.Join(s, ",") + "]"
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments, and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

const adminUsage = `usage: metaplane admin <verb> [arguments] [flags]

Every verb talks to the coordinator leader: it starts at --bootstrap-servers
and follows NOT_LEADER answers to the leader. Common flags:
  --bootstrap-servers host:port,...   coordinators to ask (default 127.0.0.1:9123)
  --json                              print the answer as JSON
  --timeout D                         give up after D (default 30s)

verbs:
`

func adminHelp(w io.Writer) {
	io.WriteString(w, adminUsage)
	for _, v := range adminVerbs {
		fmt.Fprintf(w, "  %-20s %-34s %s\n", v.name, v.args, v.summary)
	}
	fmt.Fprintln(w, "\nSee docs/admin.md, or `metaplane admin <verb> -h`.")
}

func runAdmin(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		adminHelp(env.Stdout)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	var verb *adminVerb
	for i := range adminVerbs {
		if adminVerbs[i].name == args[0] {
			verb = &adminVerbs[i]
		}
	}
	if verb == nil {
		fmt.Fprintf(env.Stderr, "metaplane admin: unknown verb %q (see `metaplane admin help`)\n", args[0])
		return ExitUsage
	}
	prog := "metaplane admin " + verb.name
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	bootstrap := fs.String("bootstrap-servers", "127.0.0.1:9123", "the coordinators to ask, `host:port,...`")
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	run := verb.flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(env.Stderr, "usage: %s %s [flags]\n\n%s\n\nflags:\n", prog, verb.args, verb.summary)
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if len(pos) != verb.npos {
		fmt.Fprintf(env.Stderr, "%s: want %d argument(s) %s, got %d\n", prog, verb.npos, verb.args, len(pos))
		return ExitUsage
	}
	client, err := adminclient.NewClient(splitList(*bootstrap))
	if err != nil {
		fmt.Fprintf(env.Stderr, "%s: --bootstrap-servers: %v\n", prog, err)
		return ExitUsage
	}
	defer client.Close()
	cctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	a := &adminCtx{ctx: cctx, env: env, client: client, json: *asJSON}
	if err := run(a, pos); err != nil {
		var ue *usageErr
		if errors.As(err, &ue) {
			fmt.Fprintf(env.Stderr, "%s: %v\n", prog, err)
			return ExitUsage
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v from %s (is a coordinator running? start one with `metaplane coordinator`)", *timeout, *bootstrap)
		}
		fmt.Fprintf(env.Stderr, "%s: %v\n", prog, err)
		return ExitFailure
	}
	return ExitOK
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
