package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/content"
)

// cmdEncode converts a 3DGS PLY to a bundled SOG locally: what
// publish.encode does before an upload, by hand.
func cmdEncode(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "encode")
	to := fs.String("to", "sog", "output format (sog: SOG version 2, bundled)")
	memFlag := fs.String("memory", "", "the most memory the encoding takes, e.g. 512MiB (default: GOMEMLIMIT less the daemon's headroom, or 1 GiB)")
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if *to != "sog" {
		return usageError(c, fs, "-to %q: the only format is sog", *to)
	}
	if len(pos) != 2 {
		return usageError(c, fs, "name the PLY to read and the SOG to write")
	}
	in, out := pos[0], pos[1]
	var limit int64
	if *memFlag != "" {
		v, err := state.ParseSize(*memFlag)
		if err != nil || v <= 0 {
			return usageError(c, fs, "-memory %q: want a size such as 512MiB", *memFlag)
		}
		limit = v
	}
	st, err := os.Stat(in)
	if err != nil {
		fmt.Fprintf(c.stderr, "splatd encode: %v\n", err)
		return exitFailure
	}
	start := time.Now()
	res, err := content.TranscodeBounded(ctx, in, out, content.EncodeMemory(limit))
	if err != nil {
		fmt.Fprintf(c.stderr, "splatd encode: %s: %s\n", in, oneLine(err.Error()))
		return exitFailure
	}
	ost, err := os.Stat(out)
	if err != nil {
		fmt.Fprintf(c.stderr, "splatd encode: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(c.stdout, "%s: %d splats, SH bands %d, %s -> %s: %s (%.1fx smaller) in %s\n",
		in, res.Splats, res.Bands, state.HumanSize(st.Size()), out, state.HumanSize(ost.Size()),
		float64(st.Size())/float64(max(1, ost.Size())), time.Since(start).Round(time.Millisecond))
	return exitOK
}
