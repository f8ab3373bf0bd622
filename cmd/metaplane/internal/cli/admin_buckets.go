package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

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
	cmd := &cobra.Command{Use: "list-buckets <db>.<table>", Args: exactArgs(1),
		Short: "list a table's buckets: replicas, leader, leader epoch, ISR, bucket epoch, offline or not"}
	cmd.Flags().StringVar(&partition, "partition", "", "list only this `partition`'s buckets (a partitioned table: every partition's by default)")
	cmd.Flags().Int32Var(&pageSize, "page-size", 1000, "buckets asked for per call, 1 to 10000 (every page is listed)")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		db, table, err := splitTable(pos[0])
		if err != nil {
			return err
		}
		if pageSize < 1 || pageSize > 10000 {
			return usageError("--page-size %d is out of range: want 1 to 10000", pageSize)
		}
		all := &adminv1.ListBucketsResponse{}
		err = a.do(cmd, func(ctx context.Context, c *adminclient.Client) error {
			req := &adminv1.ListBucketsRequest{Database: db, Table: table, Partition: partition, PageSize: pageSize}
			for {
				var page *adminv1.ListBucketsResponse
				if err := c.Admin(ctx, func(ctx context.Context, sc adminv1.AdminServiceClient) (err error) {
					page, err = sc.ListBuckets(ctx, req)
					return err
				}); err != nil {
					return err
				}
				all.Buckets = append(all.Buckets, page.Buckets...)
				if page.NextPageToken == "" {
					return nil
				}
				req.PageToken = page.NextPageToken
			}
		})
		if err != nil {
			return err
		}
		return a.print(cmd.OutOrStdout(), all, func(w io.Writer) { printBuckets(w, pos[0], all.Buckets) })
	}
	return cmd
}

func printBuckets(w io.Writer, table string, buckets []*adminv1.ListedBucket) {
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
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%d\t%s\n", orDash(lb.Partition), b.Bucket, ints(b.Replicas), leader, b.LeaderEpoch, ints(b.Isr), b.BucketEpoch, state)
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
			return usageError("want at most 1 argument [<db>.<table>], got %d", len(args))
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
			return usageError("give exactly one of --preferred and --unclean")
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
			return exitWith(ExitFailure)
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
