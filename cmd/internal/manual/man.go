package manual

import (
	"fmt"
	"io"
	"strings"
)

// roff escapes text for a roff text line: backslashes, a leading dash of a
// word (so that flags are minus signs a reader can copy), and a leading
// dot or quote, which would start a request.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	words := strings.Split(s, " ")
	for i, w := range words {
		rest := strings.TrimLeft(w, "([")
		dashes := len(rest) - len(strings.TrimLeft(rest, "-"))
		words[i] = w[:len(w)-len(rest)] + strings.Repeat(`\-`, dashes) + rest[dashes:]
	}
	s = strings.Join(words, " ")
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// roffSynopsis sets a synopsis with flags bold and placeholders italic.
func roffSynopsis(s string) string {
	var out []string
	for _, w := range strings.Fields(s) {
		alts := strings.Split(w, "|")
		for i, a := range alts {
			core := strings.TrimSuffix(strings.Trim(a, "[]"), "...")
			e, ec := roff(a), roff(core)
			switch {
			case strings.HasPrefix(core, "-"):
				e = strings.Replace(e, ec, `\fB`+ec+`\fR`, 1)
			case isPlaceholder(core):
				e = strings.Replace(e, ec, `\fI`+ec+`\fR`, 1)
			}
			alts[i] = e
		}
		out = append(out, strings.Join(alts, "|"))
	}
	return strings.Join(out, " ")
}

// writeMan writes splatd(1) in roff: fixed text around the COMMANDS
// section, which writeManCommands draws from specs.
// Man writes splatd(1) in roff: a section per command, an entry per flag.
func Man(w io.Writer, b Book) {
	specs, version := b.Commands, b.Version
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p(`.TH SPLATD 1 "" "splatd %s" "splatd manual"`, roff(version))
	p(`.SH NAME`)
	p(`splatd \- watch folders and publish finished Gaussian splat files`)
	p(`.SH SYNOPSIS`)
	p(`.B splatd`)
	p(`.I COMMAND`)
	p(`.RI [ flags ]\ [ args ]`)
	p(`.SH DESCRIPTION`)
	p(`splatd turns a folder on a capture machine into a publishing pipeline for 3D Gaussian splats.`)
	p(`It notices each finished`)
	p(`.B .ply`)
	p(`or`)
	p(`.B .sog`)
	p(`or`)
	p(`.B .spz`)
	p(`file (or unbundled SOG folder) in its watch folders, records it in a durable job queue, uploads it through a signed URL,`)
	p(`publishes it through the splat REST API, polls until processing ends and writes a receipt`)
	p(`.I FILE.splat.json`)
	p(`with the viewer link beside it.`)
	p(`The same content is never published twice, and every job resumes after a crash.`)
	p(`.PP`)
	p(`Every command takes`)
	p(`.BR \-h .`)
	p(`Flags may stand before or after arguments and take one dash or two.`)
	p(`Logs go to standard error, command output to standard output.`)
	p(`.SH COMMANDS`)
	writeManCommands(w, specs)
	p(`.SH ENVIRONMENT`)
	p(`.TP`)
	p(`.B SPLATD_CONFIG`)
	p(`The config file when`)
	p(`.B \-config`)
	p(`is not given.`)
	p(`.TP`)
	p(`.B SPLATD_TOKEN`)
	p(`The API token, when`)
	p(`.I api.token_file`)
	p(`is empty.`)
	p(`.TP`)
	p(`.B CREDENTIALS_DIRECTORY`)
	p(`Set by systemd's`)
	p(`.BR LoadCredential= ;`)
	p(`the token is read from`)
	p(`.I $CREDENTIALS_DIRECTORY/splatd\-token`)
	p(`when neither of the above gives one.`)
	p(`.SH FILES`)
	p(`.TP`)
	p(`.I /etc/splatd/config.yaml`)
	p(`The default config file; the example installed there documents every key with its default.`)
	p(`.TP`)
	p(`.I /etc/splatd/token`)
	p(`The API token (root, mode 0600), handed to the service by systemd's credentials.`)
	p(`.TP`)
	p(`.I /var/lib/splatd`)
	p(`The default state directory: the job database and the admin socket`)
	p(`.RI ( splatd.sock ,`)
	p(`mode 0600) that`)
	p(`.BR jobs ,`)
	p(`.B retry`)
	p(`and`)
	p(`.B resolve`)
	p(`use while the daemon runs.`)
	p(`.SH EXIT STATUS`)
	p(`0 on success, 1 on failure (including a missing or refused token and a second daemon on the`)
	p(`same state directory), 2 on a usage error (a bad flag or an invalid config).`)
	p(`.SH SEE ALSO`)
	p(`.BR systemctl (1),`)
	p(`.BR journalctl (1),`)
	p(`.BR systemd.exec (5);`)
	p(`the README at https://github.com/splatd/splatd.`)
}

// writeManCommands writes one subsection per command: its synopsis, its
// summary and a tagged paragraph per flag.
func writeManCommands(w io.Writer, specs []Command) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	for _, s := range specs {
		p(`.SS "%s"`, strings.TrimSpace(`\fBsplatd `+s.Name+`\fR `+roffSynopsis(s.Args)))
		p(`%s.`, roff(s.Summary))
		for _, f := range s.Flags {
			p(`.TP`)
			if f.Value == "" {
				p(`.B \-%s`, roff(f.Name))
			} else {
				p(`.BI \-%s " %s"`, roff(f.Name), roff(f.Value))
			}
			text := f.Usage
			if f.Def != "" && f.Name != "config" { // -config's usage already names its fallbacks
				text += " (default " + f.Def + ")"
			}
			p(`%s`, roff(text))
		}
	}
}
