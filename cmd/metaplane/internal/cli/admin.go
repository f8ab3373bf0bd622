package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/catalog"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

func init() { Register(newAdminCmd) }

// admin is what every `metaplane admin` verb shares: the group's
// persistent flags.
type admin struct {
	bootstrap string
	json      bool
	timeout   time.Duration
	requestID string
	tls       *tlsFlags // --tls-ca, --tls-cert, --tls-key (tls.go)
}

// adminVerbs are the constructors of the admin verbs, in the order help
// lists them.
var adminVerbs = []func(a *admin) *cobra.Command{
	adminCreateDatabase, adminListDatabases, adminDropDatabase,
	adminCreateTable, adminDescribeTable, adminListTables, adminDropTable,
	adminCreatePartition, adminListPartitions, adminDropPartition,
	adminListTabletServers, adminListBuckets, adminElectLeaders, adminReassignBuckets, adminAllocateIDs,
	adminAddACL, adminRemoveACL, adminListACLs,
	adminAlterConfig, adminDescribeConfigs, adminSetServerTag, adminLeader,
}

func newAdminCmd() *cobra.Command {
	a := &admin{}
	cmd := &cobra.Command{
		Use:   "admin <verb>",
		Short: "administer the catalog through the coordinator leader (metaplane admin help)",
		Long: `Every verb talks to the coordinator leader: it starts at --bootstrap-servers
and follows NOT_LEADER answers to the leader. The common flags may come
before or after the verb. With --json the answer is the API's response
message as JSON, and an error is one JSON object on stderr. Exit status:
0 success, 1 the call failed, 2 usage error, 3 a write's outcome is
still unknown at --timeout. A write carries a request id (--request-id,
or a fresh one) and is repeated with it after an ambiguous failure until
--timeout: the coordinators apply it once and answer a repetition with the
original result. See docs/admin.md.`,
	}
	markGroup(cmd, "verb")
	pf := cmd.PersistentFlags()
	pf.StringVar(&a.bootstrap, "bootstrap-servers", "127.0.0.1:9123", "the `host:port,...` of the coordinators to ask")
	pf.BoolVar(&a.json, "json", false, "print the answer as JSON (and an error as JSON on stderr)")
	pf.DurationVar(&a.timeout, "timeout", 30*time.Second, "give up after this long, redirects and retries included")
	pf.StringVar(&a.requestID, "request-id", "", "the request `id` of the write (default: a fresh one); run a write again with the id an \"outcome unknown\" error names to apply it at most once")
	a.tls = addTLSFlags(pf)
	for _, verb := range adminVerbs {
		cmd.AddCommand(verb(a))
	}
	return cmd
}

// do runs f with a client of the bootstrap servers and a context bounded
// by --timeout. A timeout becomes an error that says where it looked.
func (a *admin) do(cmd *cobra.Command, f func(ctx context.Context, c *adminclient.Client) error) error {
	client, err := a.client()
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
	defer cancel()
	id := a.requestID
	if id == "" {
		id = adminclient.NewRequestID()
	}
	err = f(adminclient.WithRequestID(ctx, id), client)
	if errors.Is(err, adminclient.ErrOutcomeUnknown) {
		return err // it says what was sent where, and that it was not repeated
	}
	if _, ok := errors.AsType[*adminclient.TLSError](err); ok {
		// Not retried: say what the TLS settings get wrong (tls.go).
		if d := a.diagnoseTLS(); d != "" {
			return &WithCause{Cause: err, Msg: d + " (not retried)"}
		}
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		msg := fmt.Sprintf("no answer within %v from %s", a.timeout, a.bootstrap)
		de, ok := errors.AsType[*adminclient.DeadlineError](err)
		switch {
		case ok && de.LastAnswer != nil:
			// A coordinator answered, but not for good (NOT_LEADER naming
			// a leader that could not be reached, UNAVAILABLE): say so.
			msg += strings.TrimPrefix(de.Error(), de.Err.Error())
		case a.diagnoseTLS() != "":
			msg += ": " + a.diagnoseTLS() // tls.go
		default:
			msg += " (is a coordinator running? start one with `metaplane coordinator`)"
		}
		return &WithCause{Cause: err, Msg: msg}
	}
	return err
}

// print is the one printer of the admin verbs: it writes the answer m on
// w, with --json as the API's response message in JSON (field names as in
// the .proto, every field present), else with text.
func (a *admin) print(w io.Writer, m proto.Message, text func(w io.Writer)) error {
	if !a.json {
		text(w)
		return nil
	}
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
	_, err = out.WriteTo(w)
	return err
}

// call runs one AdminService RPC on the coordinator leader (following
// redirects) and prints its answer with text, or as JSON.
func call[Req any, Resp proto.Message](cmd *cobra.Command, a *admin,
	rpc func(adminv1.AdminServiceClient, context.Context, Req, ...grpc.CallOption) (Resp, error),
	req Req, text func(w io.Writer, r Resp)) error {
	var (
		r      Resp
		detail *adminv1.ErrorDetail // of the last attempt's answer
	)
	err := a.do(cmd, func(ctx context.Context, c *adminclient.Client) error {
		err := c.Admin(ctx, func(ctx context.Context, sc adminv1.AdminServiceClient) error {
			var err error
			r, err = rpc(sc, ctx, req)
			detail = adminapi.DetailOf(err)
			return err
		})
		// The client returns the last answer's error, converted, unless
		// ctx ended: keep that answer's code for the --json error.
		if err != nil && detail != nil && ctx.Err() == nil && !errors.Is(err, adminclient.ErrOutcomeUnknown) {
			return &CodedErr{Err: err, Code: detail.Code}
		}
		return err
	})
	if err != nil {
		return err
	}
	return a.print(cmd.OutOrStdout(), r, func(w io.Writer) { text(w, r) })
}

// say prints the one-line answer of a verb that may have had nothing to
// do: done when it did it, else notDone (both formatted with args).
func say(w io.Writer, did bool, done, notDone string, args ...any) {
	if !did {
		done = notDone
	}
	fmt.Fprintf(w, done+"\n", args...)
}

// callSay is call for a verb whose text answer is one line.
func callSay[Req any, Resp proto.Message](cmd *cobra.Command, a *admin,
	rpc func(adminv1.AdminServiceClient, context.Context, Req, ...grpc.CallOption) (Resp, error),
	req Req, format string, args ...any) error {
	return call(cmd, a, rpc, req, func(w io.Writer, _ Resp) { fmt.Fprintf(w, format+"\n", args...) })
}

func adminCreateDatabase(a *admin) *cobra.Command {
	req := &adminv1.CreateDatabaseRequest{}
	cmd := &cobra.Command{Use: "create-database <db>", Short: "create a database", Args: ExactArgs(1)}
	f := cmd.Flags()
	f.StringVar(&req.Comment, "comment", "", "the database's comment")
	f.BoolVar(&req.IgnoreIfExists, "if-not-exists", false, "succeed when the database exists already")
	req.CustomProperties = kvFlag(f, "property", "a custom property `key=value` (repeatable)")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		req.Name = pos[0]
		return call(cmd, a, adminv1.AdminServiceClient.CreateDatabase, req, func(w io.Writer, r *adminv1.CreateDatabaseResponse) {
			say(w, r.Created, "created database %s", "database %s exists already: nothing created", pos[0])
		})
	}
	return cmd
}

func adminListDatabases(a *admin) *cobra.Command {
	return &cobra.Command{Use: "list-databases", Short: "list the databases", Args: NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callPages(cmd, a, func(c adminv1.AdminServiceClient, ctx context.Context, r *adminv1.ListDatabasesRequest) (*adminv1.ListDatabasesResponse, error) {
				return c.ListDatabases(ctx, r)
			}, &adminv1.ListDatabasesRequest{},
				func(r *adminv1.ListDatabasesRequest, size int32, token string) { r.PageSize, r.PageToken = size, token },
				(*adminv1.ListDatabasesResponse).GetNextPageToken,
				func(all, page *adminv1.ListDatabasesResponse) {
					all.Names, all.NextPageToken = append(all.Names, page.Names...), page.NextPageToken
				},
				func(w io.Writer, r *adminv1.ListDatabasesResponse) { printLines(w, r.Names, "(no databases)") })
		}}
}

func adminDropDatabase(a *admin) *cobra.Command {
	req := &adminv1.DropDatabaseRequest{}
	cmd := &cobra.Command{Use: "drop-database <db>", Short: "drop a database (--cascade: with its tables)", Args: ExactArgs(1)}
	f := cmd.Flags()
	f.BoolVar(&req.Cascade, "cascade", false, "drop the database's tables too")
	f.BoolVar(&req.IgnoreIfNotExists, "if-exists", false, "succeed when the database does not exist")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		req.Name = pos[0]
		return call(cmd, a, adminv1.AdminServiceClient.DropDatabase, req, func(w io.Writer, r *adminv1.DropDatabaseResponse) {
			say(w, r.Dropped, "dropped database %s", "database %s does not exist: nothing dropped", pos[0])
		})
	}
	return cmd
}

func adminCreateTable(a *admin) *cobra.Command {
	var (
		cols             []*adminv1.Column
		pk, pkeys, bkeys string
		buckets, rf      int64
		comment          string
		ifNot            bool
	)
	cmd := &cobra.Command{Use: "create-table <db>.<table>", Args: ExactArgs(1),
		Short: "create a table: --column name:TYPE ... [--primary-key c,...] [--buckets N] [--partition-key c]"}
	f := cmd.Flags()
	f.Func("column", "a column `name:TYPE` (repeatable, in order; TYPE like INT, BIGINT, STRING, CHAR(10), DECIMAL(10,2), TIMESTAMP(3), optionally NOT NULL)", func(s string) error {
		name, typ, ok := strings.Cut(s, ":")
		if !ok || strings.TrimSpace(name) == "" || strings.TrimSpace(typ) == "" {
			return fmt.Errorf("column %q: want name:TYPE", s)
		}
		cols = append(cols, &adminv1.Column{Name: strings.TrimSpace(name), Type: strings.TrimSpace(typ)})
		return nil
	})
	f.StringVar(&pk, "primary-key", "", "the primary key columns, `c1,c2`")
	f.StringVar(&pkeys, "partition-key", "", "the partition key columns, `c1,c2`")
	f.StringVar(&bkeys, "bucket-key", "", "the bucket key columns, `c1,c2` (default: the primary key without the partition keys)")
	intFlag(f, &buckets, "buckets", 1, math.MaxInt32, "the number of buckets, at most max.bucket.num (default 1)")
	intFlag(f, &rf, "replication-factor", 1, math.MaxInt32, "replicas per bucket, at most the registered tablet servers (default 3, or all of them when fewer are registered)")
	f.StringVar(&comment, "comment", "", "the table's comment")
	props := kvFlag(f, "property", "a table property `key=value` (repeatable)")
	f.BoolVar(&ifNot, "if-not-exists", false, "succeed when the table exists already")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		db, table, err := splitTable(pos[0])
		if err != nil {
			return err
		}
		if len(cols) == 0 {
			return UsageError("give at least one --column name:TYPE")
		}
		d := &adminv1.TableDescriptor{Columns: cols, PrimaryKey: SplitList(pk), PartitionKeys: SplitList(pkeys),
			BucketKeys: SplitList(bkeys), BucketCount: int32(buckets), ReplicationFactor: int32(rf), Comment: comment, Properties: props}
		req := &adminv1.CreateTableRequest{Database: db, Table: table, Descriptor_: d, IgnoreIfExists: ifNot}
		return call(cmd, a, adminv1.AdminServiceClient.CreateTable, req, func(w io.Writer, r *adminv1.CreateTableResponse) {
			if !r.Created {
				fmt.Fprintf(w, "table %s.%s exists already (id %d): nothing created\n", db, table, r.Table.TableId)
				return
			}
			fmt.Fprintf(w, "created table %s.%s (id %d, %s)\n", db, table, r.Table.TableId, plural(int(r.Table.Descriptor_.BucketCount), "bucket"))
		})
	}
	return cmd
}

func adminDescribeTable(a *admin) *cobra.Command {
	return &cobra.Command{Use: "describe-table <db>.<table>", Short: "show a table's schema, keys and buckets", Args: ExactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			db, table, err := splitTable(pos[0])
			if err != nil {
				return err
			}
			return call(cmd, a, adminv1.AdminServiceClient.GetTableInfo, &adminv1.GetTableInfoRequest{Database: db, Table: table},
				func(w io.Writer, r *adminv1.GetTableInfoResponse) { DescribeTable(w, r.Table) })
		}}
}

func adminListTables(a *admin) *cobra.Command {
	return &cobra.Command{Use: "list-tables <db>", Short: "list a database's tables", Args: ExactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			return callPages(cmd, a, func(c adminv1.AdminServiceClient, ctx context.Context, r *adminv1.ListTablesRequest) (*adminv1.ListTablesResponse, error) {
				return c.ListTables(ctx, r)
			}, &adminv1.ListTablesRequest{Database: pos[0]},
				func(r *adminv1.ListTablesRequest, size int32, token string) { r.PageSize, r.PageToken = size, token },
				(*adminv1.ListTablesResponse).GetNextPageToken,
				func(all, page *adminv1.ListTablesResponse) {
					all.Names, all.NextPageToken = append(all.Names, page.Names...), page.NextPageToken
				},
				func(w io.Writer, r *adminv1.ListTablesResponse) { printLines(w, r.Names, "(no tables in "+pos[0]+")") })
		}}
}

func adminDropTable(a *admin) *cobra.Command {
	var ifExists bool
	cmd := &cobra.Command{Use: "drop-table <db>.<table>", Short: "drop a table with its partitions and buckets", Args: ExactArgs(1)}
	cmd.Flags().BoolVar(&ifExists, "if-exists", false, "succeed when the table does not exist")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		db, table, err := splitTable(pos[0])
		if err != nil {
			return err
		}
		req := &adminv1.DropTableRequest{Database: db, Table: table, IgnoreIfNotExists: ifExists}
		return call(cmd, a, adminv1.AdminServiceClient.DropTable, req, func(w io.Writer, r *adminv1.DropTableResponse) {
			say(w, r.Dropped, "dropped table %s", "table %s does not exist: nothing dropped", pos[0])
		})
	}
	return cmd
}

func adminCreatePartition(a *admin) *cobra.Command {
	var ifNot bool
	cmd := &cobra.Command{Use: "create-partition <db>.<table> <partition>", Short: "create a partition of a partitioned table", Args: ExactArgs(2)}
	cmd.Flags().BoolVar(&ifNot, "if-not-exists", false, "succeed when the partition exists already")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		db, table, err := splitTable(pos[0])
		if err != nil {
			return err
		}
		req := &adminv1.CreatePartitionRequest{Database: db, Table: table, Partition: pos[1], IgnoreIfExists: ifNot}
		return call(cmd, a, adminv1.AdminServiceClient.CreatePartition, req, func(w io.Writer, r *adminv1.CreatePartitionResponse) {
			if !r.Created {
				fmt.Fprintf(w, "partition %s of %s exists already (id %d): nothing created\n", pos[1], pos[0], r.Partition.PartitionId)
				return
			}
			fmt.Fprintf(w, "created partition %s of %s (id %d)\n", pos[1], pos[0], r.Partition.PartitionId)
		})
	}
	return cmd
}

func adminListPartitions(a *admin) *cobra.Command {
	return &cobra.Command{Use: "list-partitions <db>.<table>", Short: "list a table's partitions", Args: ExactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			db, table, err := splitTable(pos[0])
			if err != nil {
				return err
			}
			return callPages(cmd, a, func(c adminv1.AdminServiceClient, ctx context.Context, r *adminv1.ListPartitionsRequest) (*adminv1.ListPartitionsResponse, error) {
				return c.ListPartitions(ctx, r)
			}, &adminv1.ListPartitionsRequest{Database: db, Table: table},
				func(r *adminv1.ListPartitionsRequest, size int32, token string) {
					r.PageSize, r.PageToken = size, token
				},
				(*adminv1.ListPartitionsResponse).GetNextPageToken,
				func(all, page *adminv1.ListPartitionsResponse) {
					all.Partitions, all.NextPageToken = append(all.Partitions, page.Partitions...), page.NextPageToken
				},
				func(w io.Writer, r *adminv1.ListPartitionsResponse) { printPartitions(w, pos[0], r.Partitions) })
		}}
}

func adminDropPartition(a *admin) *cobra.Command {
	var ifExists bool
	cmd := &cobra.Command{Use: "drop-partition <db>.<table> <partition>", Short: "drop a partition with its buckets", Args: ExactArgs(2)}
	cmd.Flags().BoolVar(&ifExists, "if-exists", false, "succeed when the partition does not exist")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		db, table, err := splitTable(pos[0])
		if err != nil {
			return err
		}
		req := &adminv1.DropPartitionRequest{Database: db, Table: table, Partition: pos[1], IgnoreIfNotExists: ifExists}
		return call(cmd, a, adminv1.AdminServiceClient.DropPartition, req, func(w io.Writer, r *adminv1.DropPartitionResponse) {
			say(w, r.Dropped, "dropped partition %s of %s", "partition %s of %s does not exist: nothing dropped", pos[1], pos[0])
		})
	}
	return cmd
}

func adminListTabletServers(a *admin) *cobra.Command {
	return &cobra.Command{Use: "list-tablet-servers", Short: "list the registered tablet servers", Args: NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, a, adminv1.AdminServiceClient.ListTabletServers, &adminv1.ListTabletServersRequest{},
				func(w io.Writer, r *adminv1.ListTabletServersResponse) { printTabletServers(w, r.Servers) })
		}}
}

func adminAllocateIDs(a *admin) *cobra.Command {
	req := &adminv1.AllocateIDsRequest{}
	cmd := &cobra.Command{Use: "allocate-ids <table|partition|writer>", Short: "reserve a contiguous range of ids from a sequence counter",
		Args: ExactArgs(1), ValidArgs: []string{"table", "partition", "writer"}}
	req.Count = 1
	intFlag(cmd.Flags(), &req.Count, "count", 1, catalog.MaxAllocateIDs, fmt.Sprintf("how many ids, 1 to %d", catalog.MaxAllocateIDs))
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		req.Counter = pos[0]
		return call(cmd, a, adminv1.AdminServiceClient.AllocateIDs, req, func(w io.Writer, r *adminv1.AllocateIDsResponse) {
			fmt.Fprintf(w, "%s ids [%d, %d)\n", pos[0], r.First, r.First+r.Count)
		})
	}
	return cmd
}

func adminAddACL(a *admin) *cobra.Command {
	cmd := &cobra.Command{Use: "add-acl <resourceType> <resourceName>", Args: ExactArgs(2),
		Short: "grant: --principal USER:name --operation OP [--permission ALLOW|DENY] [--host H]"}
	entry := aclFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		e, err := entry()
		if err != nil {
			return err
		}
		if e.PermissionType == "" {
			e.PermissionType = "ALLOW"
		}
		if e.Host == "" {
			e.Host = "*"
		}
		if e.PrincipalName == "" || e.Operation == "" {
			return UsageError("--principal and --operation are required")
		}
		req := &adminv1.AddACLsRequest{ResourceType: pos[0], ResourceName: pos[1], Acls: []*adminv1.ACLEntry{e}}
		return call(cmd, a, adminv1.AdminServiceClient.AddACLs, req, func(w io.Writer, r *adminv1.AddACLsResponse) {
			say(w, r.Added > 0, "added acl on %s:%s", "acl on %s:%s exists already: nothing added", pos[0], pos[1])
		})
	}
	return cmd
}

func adminRemoveACL(a *admin) *cobra.Command {
	cmd := &cobra.Command{Use: "remove-acl <resourceType> <resourceName>", Args: ExactArgs(2),
		Short: "remove the matching ACL entries (unset filters match all)"}
	entry := aclFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		e, err := entry()
		if err != nil {
			return err
		}
		req := &adminv1.RemoveACLsRequest{ResourceType: pos[0], ResourceName: pos[1], Filter: e}
		return call(cmd, a, adminv1.AdminServiceClient.RemoveACLs, req, func(w io.Writer, r *adminv1.RemoveACLsResponse) {
			if r.Removed == 0 {
				fmt.Fprintf(w, "no matching acl on %s:%s: nothing removed\n", pos[0], pos[1])
				return
			}
			fmt.Fprintf(w, "removed %s on %s:%s\n", plural(int(r.Removed), "acl"), pos[0], pos[1])
		})
	}
	return cmd
}

// aclFlags registers the ACL entry flags of add-acl and remove-acl on f;
// the function it returns builds the entry they describe.
func aclFlags(f *pflag.FlagSet) func() (*adminv1.ACLEntry, error) {
	var principal, op, perm, host string
	f.StringVar(&principal, "principal", "", "the principal, `TYPE:name` (e.g. USER:alice)")
	f.StringVar(&op, "operation", "", "the operation (ALL, READ, WRITE, CREATE, DROP, ALTER, DESCRIBE)")
	f.StringVar(&perm, "permission", "", "ALLOW or DENY (add-acl default ALLOW)")
	f.StringVar(&host, "host", "", "the host (add-acl default *)")
	return func() (*adminv1.ACLEntry, error) {
		e := &adminv1.ACLEntry{Operation: strings.ToUpper(op), PermissionType: strings.ToUpper(perm), Host: host}
		if principal != "" {
			t, n, ok := strings.Cut(principal, ":")
			if !ok {
				return nil, UsageError("--principal %q: want TYPE:name", principal)
			}
			e.PrincipalType, e.PrincipalName = strings.ToUpper(t), n
		}
		return e, nil
	}
}

func adminListACLs(a *admin) *cobra.Command {
	req := &adminv1.ListACLsRequest{}
	cmd := &cobra.Command{Use: "list-acls", Short: "list the ACLs (--resource-type T to filter)", Args: NoArgs}
	cmd.Flags().StringVar(&req.ResourceType, "resource-type", "", "only this resource type")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return call(cmd, a, adminv1.AdminServiceClient.ListACLs, req,
			func(w io.Writer, r *adminv1.ListACLsResponse) { printACLs(w, r.Resources) })
	}
	return cmd
}

func adminAlterConfig(a *admin) *cobra.Command {
	req := &adminv1.AlterConfigsRequest{}
	cmd := &cobra.Command{Use: "alter-config", Short: "change dynamic server config: --set key=value ... --remove key ...", Args: NoArgs}
	f := cmd.Flags()
	req.Set = kvFlag(f, "set", "set `key=value` (repeatable)")
	f.Func("remove", "remove `key` (repeatable)", func(s string) error { req.Remove = append(req.Remove, s); return nil })
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if len(req.Set) == 0 && len(req.Remove) == 0 {
			return UsageError("give --set key=value or --remove key")
		}
		return callSay(cmd, a, adminv1.AdminServiceClient.AlterConfigs, req, "altered %d config keys", len(req.Set)+len(req.Remove))
	}
	return cmd
}

func adminDescribeConfigs(a *admin) *cobra.Command {
	return &cobra.Command{Use: "describe-configs", Short: "show the dynamic server config", Args: NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(cmd, a, adminv1.AdminServiceClient.DescribeConfigs, &adminv1.DescribeConfigsRequest{},
				func(w io.Writer, r *adminv1.DescribeConfigsResponse) { printConfigs(w, r.Configs) })
		}}
}

func adminSetServerTag(a *admin) *cobra.Command {
	var (
		tag    int64
		remove bool
	)
	cmd := &cobra.Command{Use: "set-server-tag <id>[,<id>...]", Short: "tag tablet servers (--tag N; --remove to clear)", Args: ExactArgs(1)}
	intFlag(cmd.Flags(), &tag, "tag", 0, math.MaxInt32, "the tag: 0 (permanent offline) or 1 (temporary offline), as in the original")
	cmd.Flags().BoolVar(&remove, "remove", false, "remove the servers' tags")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		req := &adminv1.SetServerTagsRequest{Tag: int32(tag)}
		for _, s := range SplitList(pos[0]) {
			n, err := strconv.ParseInt(s, 10, 32)
			if err != nil || n < 0 {
				return UsageError("%q is not a tablet server id: want an integer from 0 to %d", s, math.MaxInt32)
			}
			req.ServerIds = append(req.ServerIds, int32(n))
		}
		if remove {
			req.Tag = -1
		}
		return callSay(cmd, a, adminv1.AdminServiceClient.SetServerTags, req, "tagged tablet servers %s", pos[0])
	}
	return cmd
}

func adminLeader(a *admin) *cobra.Command {
	return &cobra.Command{Use: "leader", Short: "show the coordinator leader (asks the bootstrap servers, no redirect)", Args: NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var r *adminv1.GetLeaderResponse
			err := a.do(cmd, func(ctx context.Context, c *adminclient.Client) error {
				var err error
				r, err = c.GetLeader(ctx)
				return err
			})
			if err != nil {
				return err
			}
			return a.print(cmd.OutOrStdout(), r, func(w io.Writer) {
				if r.LeaderAddress == "" {
					fmt.Fprintf(w, "no leader known to %s (backend %s): an election may be under way; run this again in a few seconds (on Raft, `metaplane raft status` shows the quorum)\n", orDash(r.ThisAddress), r.Backend)
				} else {
					fmt.Fprintf(w, "leader %s at %s, epoch %d (backend %s)\n", r.LeaderId, r.LeaderAddress, r.Epoch, r.Backend)
				}
				printGossipCoordinators(w, r)
			})
		}}
}

// printGossipCoordinators lists the coordinators the answering one knows,
// when it gossips (coordinator.gossip.enabled); without gossip it prints
// nothing.
func printGossipCoordinators(w io.Writer, r *adminv1.GetLeaderResponse) {
	if len(r.Coordinators) == 0 || r.Coordinators[0].GossipAddress == "" {
		return
	}
	fmt.Fprintf(w, "coordinators known to %s (gossip):\n", r.ThisAddress)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tADDRESS\tROLE\tGOSSIP")
	for _, c := range r.Coordinators {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Id, c.Address, c.Role, c.GossipAddress)
	}
	tw.Flush()
}

func printPartitions(w io.Writer, table string, parts []*adminv1.PartitionInfo) {
	if len(parts) == 0 {
		fmt.Fprintf(w, "(no partitions in %s)\n", table)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tID")
	for _, p := range parts {
		fmt.Fprintf(tw, "%s\t%d\n", p.Name, p.PartitionId)
	}
	tw.Flush()
}

func printTabletServers(w io.Writer, servers []*adminv1.TabletServer) {
	if len(servers) == 0 {
		fmt.Fprintln(w, "(no tablet servers registered)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLISTENERS\tRACK\tREGISTERED")
	for _, s := range servers {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Id, s.Listeners, orDash(s.Rack),
			time.UnixMilli(s.RegisterTimestamp).UTC().Format(time.RFC3339))
	}
	tw.Flush()
}

func printACLs(w io.Writer, resources []*adminv1.ResourceACLs) {
	if len(resources) == 0 {
		fmt.Fprintln(w, "(no acls)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tPRINCIPAL\tPERMISSION\tOPERATION\tHOST")
	for _, res := range resources {
		for _, e := range res.Acls {
			fmt.Fprintf(tw, "%s:%s\t%s:%s\t%s\t%s\t%s\n", res.ResourceType, res.ResourceName, e.PrincipalType, e.PrincipalName, e.PermissionType, e.Operation, e.Host)
		}
	}
	tw.Flush()
}

func printConfigs(w io.Writer, configs map[string]string) {
	keys := make([]string, 0, len(configs))
	for k := range configs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		fmt.Fprintln(w, "(no dynamic config)")
	}
	for _, k := range keys {
		fmt.Fprintf(w, "%s=%s\n", k, configs[k])
	}
}

// rangeValue is an integer flag that refuses, naming the range, a value
// outside [min, max] instead of letting it wrap when it is narrowed.
type rangeValue struct {
	p        *int64
	min, max int64
}

func (v *rangeValue) String() string { return strconv.FormatInt(*v.p, 10) }
func (v *rangeValue) Type() string   { return "int" }

func (v *rangeValue) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if errors.Is(err, strconv.ErrRange) || (err == nil && (n < v.min || n > v.max)) {
		return fmt.Errorf("%s is out of range: want an integer from %d to %d", s, v.min, v.max)
	}
	if err != nil {
		return fmt.Errorf("%q is not an integer (want one from %d to %d)", s, v.min, v.max)
	}
	*v.p = n
	return nil
}

// intFlag registers the integer flag name on fs, holding values from min
// to max (its default is *p's value).
func intFlag(fs *pflag.FlagSet, p *int64, name string, min, max int64, usage string) {
	fs.Var(&rangeValue{p: p, min: min, max: max}, name, usage)
}

// kvFlag registers the repeatable flag name of key=value settings on fs and
// returns the map they fill.
func kvFlag(fs *pflag.FlagSet, name, usage string) map[string]string {
	m := map[string]string{}
	fs.Func(name, usage, func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q: want key=value", s)
		}
		m[k] = v
		return nil
	})
	return m
}

func SplitList(s string) []string {
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
		return "", "", UsageError("%q: want <db>.<table>", s)
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

func DescribeTable(w io.Writer, t *adminv1.TableInfo) {
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
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\n", b.Bucket, Ints(b.Replicas), leader, Ints(b.Isr), b.CoordinatorEpoch)
		}
		tw.Flush()
	} else if len(d.PartitionKeys) > 0 {
		fmt.Fprintln(w, "(partitioned: buckets are per partition)")
	}
}

func Ints(v []int32) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(int(n))
	}
	return "[" + strings.Join(s, ",") + "]"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
