package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// The deploy/ files describe this package's metrics, so their checks live
// here, where `go test ./...` runs them; deploy/check.sh runs them too.

// TestDeployFilesNameExistingMetrics is the CI check that the alert rules and
// the Grafana dashboard only name metrics the daemon exports: a renamed
// metric would otherwise leave an alert that can never fire.
func TestDeployFilesNameExistingMetrics(t *testing.T) {
	t.Parallel()
	reg, m := NewRegistry("test", testRoutes)
	exercise(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, mf := range mfs {
		exported[mf.GetName()] = true
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				exported[mf.GetName()+s] = true
			}
		case dto.MetricType_SUMMARY:
			for _, s := range []string{"_sum", "_count"} {
				exported[mf.GetName()+s] = true
			}
		}
	}

	name := regexp.MustCompile(`\bsplatd_[a-zA-Z0-9_]+`)
	for _, file := range []string{"../deploy/prometheus/alerts.yaml", "../deploy/grafana/splatd.json"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		refs := map[string]bool{}
		for _, n := range name.FindAllString(string(b), -1) {
			refs[n] = true
		}
		if len(refs) == 0 {
			t.Errorf("%s names no splatd_ metric; is the pattern still right?", file)
		}
		var missing []string
		for n := range refs {
			if !exported[n] {
				missing = append(missing, n)
			}
		}
		sort.Strings(missing)
		for _, n := range missing {
			t.Errorf("%s names %s, which the daemon does not export", file, n)
		}
	}
}

// TestDeployDashboard checks what Grafana's import needs and JSON parsing
// alone does not: the datasource input every panel uses, and a query in
// every target.
func TestDeployDashboard(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../deploy/grafana/splatd.json")
	if err != nil {
		t.Fatal(err)
	}
	type datasource struct{ Type, UID string }
	var dash struct {
		Inputs []struct{ Name, Type, PluginID string } `json:"__inputs"`
		UID    string
		Title  string
		Panels []struct {
			ID         int
			Type       string
			Title      string
			Datasource *datasource
			Targets    []struct {
				Expr       string
				Datasource *datasource
			}
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("splatd.json: %v", err)
	}
	if len(dash.Inputs) != 1 || dash.Inputs[0].Name != "DS_PROMETHEUS" || dash.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs = %+v, want the one prometheus input DS_PROMETHEUS", dash.Inputs)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Errorf("dashboard needs a uid and a title (uid %q, title %q)", dash.UID, dash.Title)
	}
	ids := map[int]bool{}
	queries := 0
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${DS_PROMETHEUS}" {
			t.Errorf("panel %q: datasource %+v, want uid ${DS_PROMETHEUS}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q has a target without expr", p.Title)
			}
			queries++
		}
	}
	if queries == 0 {
		t.Error("dashboard has no queries")
	}
}

// TestDeployDashboardShowsBandwidth: the dashboard plots the upload
// bandwidth limit in force and the bytes still to send.
func TestDeployDashboardShowsBandwidth(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../deploy/grafana/splatd.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"splatd_upload_bandwidth_limit_bytes_per_second", "splatd_upload_bytes_in_flight"} {
		if !regexp.MustCompile(`"expr": "[^"]*\b` + name + `\b`).Match(b) {
			t.Errorf("deploy/grafana/splatd.json has no query of %s", name)
		}
	}
}
