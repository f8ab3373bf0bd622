package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/metaplane/metaplane/adminclient"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// The bucket leadership verbs: list-buckets and elect-leaders
// (docs/buckets.md).

func adminListBuckets(a *admin) *cobra.Command {
	var partition string
	var pageSize int32
	cmd := &cobra.Command{Use: "list-buckets <db>.<table>", Args: ExactArgs(1),
		Short: "list a table's buckets: replicas, leader, leader epoch, ISR, bucket epoch, offline or not"}
	cmd.Flags().StringVar(&partition, "partition", "", "list only this `partition`'s buckets (a partitioned table: every partition's by default)")
	cmd.Flags().Int32Var(&pageSize, "page-size", 1000, "buckets asked for per call, 1 to 10000 (every page is listed)")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		db, table, err := splitTable(pos[0])
		if err != nil {
			return err
		}
		if pageSize < 1 || pageSize > 10000 {
			return UsageError("--page-size %d is out of range: want 1 to 10000", pageSize)
		}
		return callPages(cmd, a, func(c adminv1.AdminServiceClient, ctx context.Context, r *adminv1.ListBucketsRequest) (*adminv1.ListBucketsResponse, error) {
			return c.ListBuckets(ctx, r)
		}, &adminv1.ListBucketsRequest{Database: db, Table: table, Partition: partition},
			func(r *adminv1.ListBucketsRequest, _ int32, token string) { r.PageSize, r.PageToken = pageSize, token },
			(*adminv1.ListBucketsResponse).GetNextPageToken,
			func(all, page *adminv1.ListBucketsResponse) {
				all.Buckets, all.NextPageToken = append(all.Buckets, page.Buckets...), page.NextPageToken
			},
			func(w io.Writer, r *adminv1.ListBucketsResponse) { PrintBuckets(w, pos[0], r.Buckets) })
	}
	return cmd
}

func PrintBuckets(w io.Writer, table string, buckets []*adminv1.ListedBucket) {
	if len(buckets) == 0 {
		fmt.Fprintf(w, "(no buckets in %s)\n", table)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tBUCKET\tREPLICAS\tLEADER\tLEADER EPOCH\tISR\tBUCKET EPOCH\tSTATE")
	offline := 0
	for _, lb := range buckets {
		b := lb.Bucket
		leader := strconv.Itoa(int(b.Leader))
		if b.Leader < 0 {
			leader = "none"
		}
		state := "online"
		if lb.Offline {
			state = "OFFLINE"
			offline++
		}
		if len(lb.TargetReplicas) > 0 {
			state += ", reassigning to " + Ints(lb.TargetReplicas)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%d\t%s\n", orDash(lb.Partition), b.Bucket, Ints(b.Replicas), leader, b.LeaderEpoch, Ints(b.Isr), b.BucketEpoch, state)
	}
	tw.Flush()
	if offline > 0 {
		fmt.Fprintf(w, "%s offline: no live leader. They get one as soon as a member of their ISR registers again; `metaplane admin elect-leaders %s --unclean` elects a live replica outside the ISR instead (data may be lost).\n",
			plural(offline, "bucket"), table)
	}
}

func adminElectLeaders(a *admin) *cobra.Command {
	var preferred, unclean bool
	cmd := &cobra.Command{Use: "elect-leaders [<db>.<table>]", Args: func(cmd *cobra.Command, args []string) error {
		if len(args) > 1 {
			return UsageError("want at most 1 argument [<db>.<table>], got %d", len(args))
		}
		return nil
	},
		Short: "elect bucket leaders: --preferred (back to the first assigned replica) or --unclean (offline buckets, data may be lost)",
		Long: `Elects bucket leaders, for one table or (without an argument) every table.

--preferred moves each bucket's leadership back to its first assigned
replica where that replica is registered and in the ISR (after a tablet
server came back, its buckets stay led by the others until this runs).

--unclean gives each offline bucket (no live member of its ISR) the first
assigned replica that is alive as its leader, with an ISR of that replica
alone: the records the old ISR held and it did not are lost. Use it only
when the ISR's servers cannot come back.

Exit status: 0 when every bucket that needed a leader got one, 1 when some
could not (the text says how many and why), 2 usage error.`}
	cmd.Flags().BoolVar(&preferred, "preferred", false, "move leadership to the first assigned replica where it is alive and in the ISR")
	cmd.Flags().BoolVar(&unclean, "unclean", false, "elect a live replica outside the ISR for offline buckets (data may be lost)")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		if preferred == unclean {
			return UsageError("give exactly one of --preferred and --unclean")
		}
		req := &adminv1.ElectLeadersRequest{Type: adminv1.ElectionType_ELECTION_TYPE_PREFERRED}
		what := "every table"
		if unclean {
			req.Type = adminv1.ElectionType_ELECTION_TYPE_UNCLEAN
			fmt.Fprintln(cmd.ErrOrStderr(), "unclean election: an offline bucket's new leader may lack records its old ISR acknowledged; they are lost")
		}
		if len(pos) == 1 {
			db, table, err := splitTable(pos[0])
			if err != nil {
				return err
			}
			req.Database, req.Table, what = db, table, pos[0]
		}
		var resp *adminv1.ElectLeadersResponse
		err := call(cmd, a, func(sc adminv1.AdminServiceClient, ctx context.Context, req *adminv1.ElectLeadersRequest, opts ...grpc.CallOption) (*adminv1.ElectLeadersResponse, error) {
			r, err := sc.ElectLeaders(ctx, req, opts...)
			resp = r
			return r, err
		}, req, func(w io.Writer, r *adminv1.ElectLeadersResponse) { printElected(w, what, unclean, r) })
		if err != nil {
			return err
		}
		if resp.NotEligible > 0 {
			why := "their first replica is not registered or not in the ISR"
			if unclean {
				why = "none of their assigned replicas is registered"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s of %s could not be elected: %s\n", plural(int(resp.NotEligible), "bucket"), what, why)
			return ExitWith(ExitFailure)
		}
		return nil
	}
	return cmd
}

func printElected(w io.Writer, what string, unclean bool, r *adminv1.ElectLeadersResponse) {
	kind := "preferred"
	if unclean {
		kind = "unclean"
	}
	fmt.Fprintf(w, "%s election over %s: %s elected, %d needed nothing, %d not eligible\n", kind, what,
		plural(int(r.ElectedCount), "leader"), r.Already, r.NotEligible)
	if len(r.Elected) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE ID\tPARTITION ID\tBUCKET\tFROM\tTO\tLEADER EPOCH")
	for _, e := range r.Elected {
		part := "-"
		if e.PartitionId >= 0 {
			part = strconv.FormatInt(e.PartitionId, 10)
		}
		from := strconv.Itoa(int(e.PreviousLeader))
		if e.PreviousLeader < 0 {
			from = "none"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%d\n", e.TableId, part, e.Bucket, from, e.Leader, e.LeaderEpoch)
	}
	tw.Flush()
	if int(r.ElectedCount) > len(r.Elected) {
		fmt.Fprintf(w, "(%d more not listed)\n", int(r.ElectedCount)-len(r.Elected))
	}
}

func adminReassignBuckets(a *admin) *cobra.Command {
	var (
		partition string
		targets   []string
		buckets   []int32
		cancel    bool
		noWait    bool
	)
	cmd := &cobra.Command{Use: "reassign-buckets <db>.<table>", Args: ExactArgs(1),
		Short: "move buckets' replicas to new lists (--replicas B=ID,ID,...), or --cancel the moves in progress",
		Long: `Moves buckets' replicas to new lists. For each --replicas B=ID,ID,... the new
replicas are added to bucket B's assignment; once each of them is in the ISR
(its leader takes them in as they catch up), the coordinator moves the
leadership to the first replica of the new list that is alive and in the ISR
(when the leader is not one of the new list) and removes the old replicas.
A new list naming a tablet server that is not registered is refused, and
nothing is started.

The verb waits until every reassignment it started is done, showing the
progress on stderr; when --timeout ends first it undoes them (as --cancel
does) and says so. With --no-wait it returns once they are started
(list-buckets shows the ones in progress: target_replicas).

--cancel undoes the reassignments in progress of the buckets --bucket names
(repeatable), or of every bucket of the table (or --partition).

Exit status: 0 done (or started, with --no-wait; or cancelled), 1 refused,
failed, or not done within --timeout (then undone), 2 usage error.`}
	f := cmd.Flags()
	f.StringVar(&partition, "partition", "", "the `partition` of a partitioned table")
	f.StringArrayVar(&targets, "replicas", nil, "a bucket's new replicas, `B=ID,ID,...` (repeatable)")
	f.Int32SliceVar(&buckets, "bucket", nil, "with --cancel: a bucket whose reassignment to undo (repeatable; default every bucket)")
	f.BoolVar(&cancel, "cancel", false, "undo the reassignments in progress")
	f.BoolVar(&noWait, "no-wait", false, "return once the reassignments are started")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		db, table, err := splitTable(pos[0])
		if err != nil {
			return err
		}
		req := &adminv1.ReassignBucketsRequest{Database: db, Table: table, Partition: partition, Cancel: cancel}
		switch {
		case cancel && len(targets) > 0:
			return UsageError("--cancel takes --bucket, not --replicas")
		case !cancel && len(buckets) > 0:
			return UsageError("--bucket goes with --cancel; give the new lists with --replicas B=ID,ID,...")
		case !cancel && len(targets) == 0:
			return UsageError("give at least one --replicas B=ID,ID,... (or --cancel)")
		}
		for _, b := range buckets {
			req.Targets = append(req.Targets, &adminv1.ReassignBucketsRequest_Target{Bucket: b})
		}
		for _, t := range targets {
			tg, err := parseReassignTarget(t)
			if err != nil {
				return err
			}
			req.Targets = append(req.Targets, tg)
		}
		var resp *adminv1.ReassignBucketsResponse
		err = a.do(cmd, func(ctx context.Context, c *adminclient.Client) error {
			return c.Admin(ctx, func(ctx context.Context, sc adminv1.AdminServiceClient) (err error) {
				resp, err = sc.ReassignBuckets(ctx, req)
				return err
			})
		})
		if err != nil {
			return err
		}
		if cancel || noWait || resp.Started == 0 {
			return a.print(cmd.OutOrStdout(), resp, func(w io.Writer) {
				if cancel {
					fmt.Fprintf(w, "cancelled %s of %s (%d had none in progress)\n", plural(int(resp.Cancelled), "reassignment"), pos[0], resp.Unchanged)
					return
				}
				fmt.Fprintf(w, "started %s of %s (%d unchanged); `metaplane admin list-buckets %s` shows them in progress\n",
					plural(int(resp.Started), "reassignment"), pos[0], resp.Unchanged, pos[0])
			})
		}
		wanted := map[int32]bool{}
		for _, t := range req.Targets {
			wanted[t.Bucket] = true
		}
		werr := a.do(cmd, func(ctx context.Context, c *adminclient.Client) error {
			return waitReassigned(ctx, c, cmd.ErrOrStderr(), req, wanted)
		})
		if werr != nil {
			// Not done: undo what this verb started.
			undo := &adminv1.ReassignBucketsRequest{Database: db, Table: table, Partition: partition, Cancel: true, Targets: req.Targets}
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 15*time.Second)
			defer ccancel()
			client, cerr := a.client()
			if cerr == nil {
				defer client.Close()
				cerr = client.Admin(cctx, func(ctx context.Context, sc adminv1.AdminServiceClient) error {
					_, err := sc.ReassignBuckets(ctx, undo)
					return err
				})
			}
			if cerr != nil {
				return fmt.Errorf("the reassignment did not finish (%v) and undoing it failed too (%v): `metaplane admin list-buckets %s` shows what is in progress; undo it with `metaplane admin reassign-buckets %s --cancel`",
					werr, cerr, pos[0], pos[0])
			}
			return fmt.Errorf("the reassignment did not finish (%v): it was undone, the buckets keep their replicas; a new replica joins the ISR once its tablet server is registered and caught up", werr)
		}
		return a.print(cmd.OutOrStdout(), resp, func(w io.Writer) {
			fmt.Fprintf(w, "reassigned %s of %s (%d unchanged)\n", plural(int(resp.Started), "bucket"), pos[0], resp.Unchanged)
		})
	}
	return cmd
}

// parseReassignTarget parses B=ID,ID,...
func parseReassignTarget(s string) (*adminv1.ReassignBucketsRequest_Target, error) {
	b, list, ok := strings.Cut(s, "=")
	bn, err := strconv.ParseInt(strings.TrimSpace(b), 10, 32)
	if !ok || err != nil || bn < 0 {
		return nil, UsageError("--replicas %q: want B=ID,ID,... (a bucket number, then the new replica ids)", s)
	}
	t := &adminv1.ReassignBucketsRequest_Target{Bucket: int32(bn)}
	for _, id := range SplitList(list) {
		n, err := strconv.ParseInt(id, 10, 32)
		if err != nil || n < 0 {
			return nil, UsageError("--replicas %q: %q is not a tablet server id", s, id)
		}
		t.Replicas = append(t.Replicas, int32(n))
	}
	if len(t.Replicas) == 0 {
		return nil, UsageError("--replicas %q: no replica ids after =", s)
	}
	return t, nil
}

// waitReassigned waits until no bucket of wanted has a reassignment in
// progress, saying on stderr what each waits for when that changes.
func waitReassigned(ctx context.Context, c *adminclient.Client, stderr io.Writer, req *adminv1.ReassignBucketsRequest, wanted map[int32]bool) error {
	last := ""
	for {
		list := &adminv1.ListBucketsRequest{Database: req.Database, Table: req.Table, Partition: req.Partition, PageSize: 10000}
		var pending []string
		for {
			var page *adminv1.ListBucketsResponse
			if err := c.Admin(ctx, func(ctx context.Context, sc adminv1.AdminServiceClient) (err error) {
				page, err = sc.ListBuckets(ctx, list)
				return err
			}); err != nil {
				return err
			}
			for _, lb := range page.Buckets {
				if !wanted[lb.Bucket.Bucket] || len(lb.TargetReplicas) == 0 {
					continue
				}
				var missing []int32
				for _, r := range lb.TargetReplicas {
					if !slices.Contains(lb.Bucket.Isr, r) {
						missing = append(missing, r)
					}
				}
				pending = append(pending, fmt.Sprintf("bucket %d waits for %s to join the ISR %s", lb.Bucket.Bucket, Ints(missing), Ints(lb.Bucket.Isr)))
			}
			if page.NextPageToken == "" {
				break
			}
			list.PageToken = page.NextPageToken
		}
		if len(pending) == 0 {
			fmt.Fprintf(stderr, "reassignment: %d of %d done\n", len(wanted), len(wanted))
			return nil
		}
		if msg := fmt.Sprintf("reassignment: %d of %d done; %s", len(wanted)-len(pending), len(wanted), strings.Join(pending, "; ")); msg != last {
			fmt.Fprintln(stderr, msg)
			last = msg
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s still in progress at --timeout", plural(len(pending), "reassignment"))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
