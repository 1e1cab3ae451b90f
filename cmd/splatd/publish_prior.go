package main

import (
	"context"
	"fmt"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/cmd/internal/daemon"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/after"
)

// priorPublishes is what `splatd publish` knows of earlier publishes
// before it sends a file: the daemon's state (through its admin socket,
// else the state file; none when there is no state yet).
type priorPublishes struct {
	bySHA map[string]daemon.JobView
}

func loadPriorPublishes(ctx context.Context, cfg *config.Config) (priorPublishes, error) {
	p := priorPublishes{bySHA: map[string]daemon.JobView{}}
	views, _, err := daemon.KnownJobs(ctx, cfg)
	if err != nil {
		return p, err
	}
	for _, v := range views {
		if v.SHA256 != "" && v.URL != "" && v.Stage == string(state.Done) {
			if _, ok := p.bySHA[v.SHA256]; !ok {
				p.bySHA[v.SHA256] = v
			}
		}
	}
	return p, nil
}

// find says where the content of path was published before ("" when
// nowhere known), and its viewer link: a receipt beside the file that says
// done for this content, or a done job of the daemon with this sha256. sum
// is the content's sha256 when known (an unbundled SOG folder's bundle,
// hashed as it was built); "": path is hashed here.
func (p priorPublishes) find(ctx context.Context, path, sum string) (where, url string, err error) {
	if sum == "" {
		if sum, err = daemon.HashFile(ctx, nil, "", path); err != nil {
			return "", "", err
		}
	}
	if r, err := after.ReadReceipt(path); err == nil && r.SHA256 == sum && (r.Status == "done" || r.Status == "duplicate") && r.Splat.URL != "" {
		return "its receipt " + after.ReceiptPath(path), r.Splat.URL, nil
	}
	if j, ok := p.bySHA[sum]; ok {
		return fmt.Sprintf("the daemon's job %d (%s)", j.ID, j.File), j.URL, nil
	}
	return "", "", nil
}
