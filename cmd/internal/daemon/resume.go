package daemon

import (
	"fmt"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
)

// resumeLines is the most jobs logged one by one at start; the rest are
// only counted.
const resumeLines = 20

// logResume says, before the workers start, which jobs a previous run
// left unfinished (after a stop, a crash or kill -9): "resuming N jobs",
// then one line per job past its content check, with the stage it resumes
// at and, for a v1 upload, the parts sent before (the worker logs what the
// server holds once it asked).
func logResume(st *queue.Store, log zerolog.Logger) {
	var live []state.Stage
	for _, s := range state.Stages {
		if !s.Final() {
			live = append(live, s)
		}
	}
	jobs, err := st.List(queue.Filter{Stages: live})
	if err != nil || len(jobs) == 0 {
		return
	}
	byStage := zerolog.Dict()
	counts := map[state.Stage]int{}
	for _, j := range jobs {
		counts[j.Stage]++
	}
	for _, s := range live {
		if counts[s] > 0 {
			byStage.Int(string(s), counts[s])
		}
	}
	log.Info().Int("jobs", len(jobs)).Dict("stages", byStage).Msg(fmt.Sprintf("resuming %d jobs left unfinished by the last run", len(jobs)))
	shown := 0
	for _, j := range jobs {
		if j.Stage == state.Queued {
			continue
		}
		if shown++; shown > resumeLines {
			break
		}
		ev := log.Info().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("stage", string(j.Stage))
		if j.Stage != state.Signed {
			ev.Msg(fmt.Sprintf("resuming job %d at stage %s", j.ID, j.Stage))
			continue
		}
		if v := j.V1; v != nil && v.Parts > 0 {
			stored := 0
			for _, e := range v.ETags {
				if e != "" {
					stored++
				}
			}
			ev.Int("parts", v.Parts).Int("parts_committed", stored).
				Msg(fmt.Sprintf("resuming job %d's upload: %d of %d parts were sent before; the server is asked which it holds before any part is sent", j.ID, stored, v.Parts))
			continue
		}
		ev.Msg(fmt.Sprintf("resuming job %d's upload from its start (a legacy upload is one PUT)", j.ID))
	}
}
