package cli

import (
	"context"
	"io"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/adminclient"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// listPageSize is what the list verbs ask for per call; they follow every
// page (the coordinator answers a list in pages: docs/admin.md).
const listPageSize = 1000

// callPages runs a paged list RPC until its last page, merging each page
// into the first answer with merge, then prints the whole as call does.
// setToken puts a page token (and the page size) into req; next reads an
// answer's next page token.
func callPages[Req any, Resp proto.Message](cmd *cobra.Command, a *admin,
	rpc func(adminv1.AdminServiceClient, context.Context, Req) (Resp, error),
	req Req, setToken func(req Req, size int32, token string), next func(Resp) string, merge func(all, page Resp),
	text func(w io.Writer, r Resp)) error {
	var all Resp
	first := true
	setToken(req, listPageSize, "")
	err := a.do(cmd, func(ctx context.Context, c *adminclient.Client) error {
		for {
			var page Resp
			if err := c.Admin(ctx, func(ctx context.Context, sc adminv1.AdminServiceClient) (err error) {
				page, err = rpc(sc, ctx, req)
				return err
			}); err != nil {
				return err
			}
			if first {
				all, first = page, false
			} else {
				merge(all, page)
			}
			t := next(page)
			if t == "" {
				return nil
			}
			setToken(req, listPageSize, t)
		}
	})
	if err != nil {
		return err
	}
	return a.print(cmd.OutOrStdout(), all, func(w io.Writer) { text(w, all) })
}
