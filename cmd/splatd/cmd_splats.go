package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/splatd/splatd/uploader/api"
)

// cmdSplats lists the account's own splats through the v1 API (GET
// /v1/splats), newest first as the server orders them, paging by offset up
// to the server's total.
func cmdSplats(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "splats")
	cfgPath := configFlag(c, fs)
	limit := fs.Int("limit", 0, "splats per request, 1..128 (the API's maximum; default 20, or 128 with -all)")
	all := fs.Bool("all", false, "page through every splat of the account")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(c, fs, "takes no arguments, got %q", pos[0])
	}
	if isSet(fs, "limit") && (*limit < 1 || *limit > api.MaxSplatsLimit) {
		return usageError(c, fs, "-limit must be between 1 and %d (the API refuses more per request), got %d", api.MaxSplatsLimit, *limit)
	}
	if *limit == 0 {
		*limit = 20
		if *all {
			*limit = api.MaxSplatsLimit
		}
	}
	a, code := loadAPI(c, *cfgPath, nil, cliLogger(c))
	if a == nil {
		return code
	}
	list, err := a.splats(ctx, *limit, *all)
	if err != nil {
		fmt.Fprintf(c.stderr, "splats: %s\n", a.explain(err))
		return exitFailure
	}
	if *asJSON {
		return printJSON(c, list)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tVISIBILITY\tCREATED\tTITLE\tVIEWER LINK")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Status, s.Visibility, rfc3339(s.CreatedAt), oneLine(s.Title), s.ViewerURL)
	}
	tw.Flush()
	if len(list) == 0 {
		fmt.Fprintln(c.stderr, "the account has no splats")
	}
	return exitOK
}

// splats lists the account's splats: one page, or with all every page up
// to the total the server reports (offset paging, so a splat published
// meanwhile may shift one into the next page: ids seen are kept once).
func (a *apiEnv) splats(ctx context.Context, limit int, all bool) ([]api.SplatV1, error) {
	list := []api.SplatV1{}
	seen := map[string]bool{}
	for skip := 0; ; {
		var page api.SplatList
		err := retryAPI(ctx, func() error {
			var err error
			page, err = a.client.ListSplats(ctx, limit, skip)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, s := range page.Data {
			if !seen[s.ID] {
				seen[s.ID] = true
				list = append(list, s)
			}
		}
		skip += len(page.Data)
		if !all || len(page.Data) == 0 || skip >= page.Pagination.Total || skip > api.MaxSplatsSkip {
			return list, nil
		}
	}
}
