package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/splatd/splatd/cmd/internal/manual"
)

// runInProcess runs splatd with args in this process and returns the exit
// code and standard output.
func runInProcess(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errb strings.Builder
	c := &cli{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	code := dispatch(context.Background(), c, args)
	if code != exitOK {
		t.Logf("splatd %v: exit %d, stderr:\n%s", args, code, errb.String())
	}
	return code, out.String()
}

// TestSpecsReadTheRealFlagSets: flags come from each command's flag set,
// including those its synopsis leaves out (sim's -window).
func TestSpecsReadTheRealFlagSets(t *testing.T) {
	t.Parallel()
	byName := map[string]manual.Command{}
	for _, s := range book().Commands {
		byName[s.Name] = s
	}
	for _, c := range commands() {
		if _, ok := byName[c.name]; !ok {
			t.Errorf("command %q has no spec", c.name)
		}
	}
	for _, tc := range []struct {
		cmd, flag, value string
	}{
		{"run", "config", "FILE"},
		{"jobs", "state", "STAGE"},
		{"jobs", "json", ""},
		{"sim", "window", "DURATION"},
		{"checkpoints", "limit", "N"},
		{"retry", "failed", ""},
	} {
		i := slices.IndexFunc(byName[tc.cmd].Flags, func(f manual.Flag) bool { return f.Name == tc.flag })
		if i < 0 {
			t.Errorf("%s: no flag -%s in %+v", tc.cmd, tc.flag, byName[tc.cmd].Flags)
			continue
		}
		if got := byName[tc.cmd].Flags[i].Value; got != tc.value {
			t.Errorf("%s -%s: value placeholder %q, want %q", tc.cmd, tc.flag, got, tc.value)
		}
	}
	if w := byName["completion"].Words; !slices.Equal(w, []string{"bash", "zsh", "fish"}) {
		t.Errorf("completion words = %v", w)
	}
	if w := byName["config"].Words; !slices.Equal(w, []string{"check"}) {
		t.Errorf("config words = %v", w)
	}
	if p := byName["resolve"].Params; !slices.Equal(p, []string{"ID", "SPLAT_ID"}) {
		t.Errorf("resolve params = %v", p)
	}
}

// TestCompletionNamesEveryCommandAndFlag: each script offers every command
// of the table and every flag of every command.
func TestCompletionNamesEveryCommandAndFlag(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			t.Parallel()
			code, script := runInProcess(t, "completion", shell)
			if code != exitOK {
				t.Fatalf("exit %d", code)
			}
			for _, s := range book().Commands {
				if !strings.Contains(script, s.Name) {
					t.Errorf("command %s missing", s.Name)
				}
				for _, f := range s.Flags {
					if !strings.Contains(script, "-"+f.Name) && !strings.Contains(script, "-o "+f.Name) {
						t.Errorf("%s: flag -%s missing", s.Name, f.Name)
					}
				}
			}
		})
	}
	if code, _ := runInProcess(t, "completion", "tcsh"); code != exitUsage {
		t.Errorf("completion tcsh: exit %d, want %d", code, exitUsage)
	}
}

// TestBashCompletion runs the script in bash on typed command lines.
func TestBashCompletion(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	_, script := runInProcess(t, "completion", "bash")
	dir := t.TempDir()
	file := filepath.Join(dir, "splatd.bash")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "conf.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// $1 is the line as typed, cursor at its end; COMPREPLY one per line.
	const driver = `source "$0"; read -ra COMP_WORDS <<<"$1"; [[ $1 == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _splatd; printf '%s\n' "${COMPREPLY[@]}"`
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"splatd re", []string{"retry", "resolve", "republish", "reload"}},
		{"splatd co", []string{"config", "completion"}},
		{"splatd jobs -", []string{"-all", "-config", "-interval", "-json", "-limit", "-state", "-watch", "-h"}},
		{"splatd jobs -state u", []string{"uploading", "uploaded"}},
		{"splatd jobs -state p", []string{"publishing", "processing"}},
		{"splatd jobs --state h", []string{"held"}},
		{"splatd completion ", []string{"bash", "zsh", "fish"}},
		{"splatd help ma", []string{"man"}},
		{"splatd config ", []string{"check"}},
		{"splatd run -config con", []string{"conf.yaml"}},
		{"splatd validate con", []string{"conf.yaml"}},
		{"splatd checkpoints -limit ", nil},
	} {
		cmd := exec.Command(bash, "--norc", "-c", driver, file, tc.line)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%q: %v\n%s", tc.line, err, out)
			continue
		}
		got := strings.Fields(string(out))
		if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("%q completes to %q, want %q", tc.line, got, tc.want)
		}
	}
}

// TestFishCompletion asks fish itself what the script completes.
func TestFishCompletion(t *testing.T) {
	t.Parallel()
	fish, err := exec.LookPath("fish")
	if err != nil {
		t.Skip("no fish (Debian package fish; .ci/run installs it)")
	}
	_, script := runInProcess(t, "completion", "fish")
	file := filepath.Join(t.TempDir(), "splatd.fish")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"splatd re", []string{"retry", "resolve", "republish", "reload"}},
		{"splatd jobs -s", []string{"-state"}},
		{"splatd jobs -state p", []string{"publishing", "processing"}},
		{"splatd completion ", []string{"bash", "fish", "zsh"}},
	} {
		out, err := exec.Command(fish, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, file, tc.line).CombinedOutput()
		if err != nil {
			t.Errorf("%q: %v\n%s", tc.line, err, out)
			continue
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" {
				got = append(got, strings.Split(l, "\t")[0]) // candidate, then its description
			}
		}
		slices.Sort(got)
		slices.Sort(tc.want)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q completes to %q, want %q", tc.line, got, tc.want)
		}
	}
}

// TestZshCompletionLoads: zsh parses the script and registers it with
// compinit without an error (zsh's completion cannot run outside a
// terminal, so the behaviour is checked through bash and fish).
func TestZshCompletionLoads(t *testing.T) {
	t.Parallel()
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("no zsh (Debian package zsh; .ci/run installs it)")
	}
	_, script := runInProcess(t, "completion", "zsh")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "_splatd"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(zsh, "-n", filepath.Join(dir, "_splatd")).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
	cmd := exec.Command(zsh, "-f", "-c", `fpath=($1 $fpath); autoload -Uz compinit; compinit -u -d $1/.zcompdump; print -r -- $_comps[splatd]`, "zsh", dir)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "_splatd" {
		t.Fatalf("compinit did not register _splatd for splatd: %v\n%s", err, out)
	}
}
