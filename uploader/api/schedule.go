package api

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/splatd/splatd/state"
)

// Bandwidth syntax, after rclone's --bwlimit: "", "0" or "off" (no limit),
// one rate, or a weekly timetable of entries [DAY-]HH:MM,RATE in local time,
// each rate holding until the next entry's and the week's last wrapping to
// its first. A rate is a number and a unit, optionally "/s": K, M, G (and
// Ki, KiB, …) are powers of 1024, kB, MB, GB powers of 1000. The full rules
// are in docs/architecture.md, "Bandwidth limit".

const (
	bwMinutesPerDay  = 24 * 60
	bwMinutesPerWeek = 7 * bwMinutesPerDay
	// bwMaxRate keeps every rate and the limiter's arithmetic far from
	// overflow; it is ~1 EiB/s, beyond any uplink.
	bwMaxRate = 1 << 60
)

// Schedule is a bandwidth limit that may change with the time of week. The
// zero Schedule is unlimited. A Schedule is immutable and safe to share.
type Schedule struct {
	entries []bwEntry // as written, for String; nil for a constant rate
	slots   []bwSlot  // by start; nil when the rate never changes
	rate    int64     // the rate when slots is nil; 0 = unlimited
}

// bwEntry is one timetable entry as written.
type bwEntry struct {
	day    int // 0 = Monday … 6 = Sunday; -1 = every day
	minute int // minute of the day
	rate   int64
}

// bwSlot is a stretch of the week, from start (minute of the week, Monday
// 00:00 = 0) until the next slot's start.
type bwSlot struct {
	start int
	rate  int64
}

var bwDays = [7]string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}

// ParseBandwidth parses a bandwidth limit: "", "0" or "off" for none, one
// rate such as "50MiB/s", "20MB/s", "512KiB/s" or "10M", or an rclone-style
// weekly timetable such as "08:00,20MiB/s 19:00,off" or "Mon-08:00,512k
// Sat-10:00,off" in local time (the syntax above). Errors name the
// offending token.
func ParseBandwidth(s string) (Schedule, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return Schedule{}, nil
	}
	if !strings.Contains(s, ",") {
		return parseOneRate(s, fields)
	}
	entries, err := parseBandwidthEntries(fields)
	if err != nil {
		return Schedule{}, err
	}
	slots, err := layOutWeek(entries, fields)
	if err != nil {
		return Schedule{}, err
	}
	sched := Schedule{entries: entries}
	if len(slots) == 1 {
		sched.rate = slots[0].rate
	} else {
		sched.slots = slots
	}
	return sched, nil
}

// parseOneRate parses a bandwidth without a timetable: one rate, possibly
// written with a space ("2 MiB/s"). The errors name the likely mistake: a
// timetable entry without its rate, or an upload:download pair.
func parseOneRate(s string, fields []string) (Schedule, error) {
	if len(fields) == 1 {
		tok := fields[0]
		if _, _, err := parseBandwidthTime(tok); err == nil {
			return Schedule{}, bwTokenError(tok, errors.New("a timetable entry is TIME,RATE, e.g. 08:00,20MiB/s"))
		}
		if strings.Contains(tok, ":") {
			return Schedule{}, bwTokenError(tok, errors.New("an upload:download rate pair is not supported (splatd only uploads); give one rate"))
		}
		r, err := parseBandwidthRate(tok)
		if err != nil {
			return Schedule{}, bwTokenError(tok, err)
		}
		return Schedule{rate: r}, nil
	}
	r, err := parseBandwidthRate(strings.Join(fields, ""))
	if err != nil {
		return Schedule{}, fmt.Errorf("%q is neither one rate (e.g. 2MiB/s) nor a timetable of TIME,RATE entries: %w", strings.TrimSpace(s), err)
	}
	return Schedule{rate: r}, nil
}

// parseBandwidthEntries parses each [DAY-]HH:MM,RATE entry of a timetable.
func parseBandwidthEntries(fields []string) ([]bwEntry, error) {
	entries := make([]bwEntry, 0, len(fields))
	for _, tok := range fields {
		when, rate, ok := strings.Cut(tok, ",")
		if !ok {
			return nil, bwTokenError(tok, errors.New("a timetable entry is [DAY-]HH:MM,RATE; a plain rate cannot be mixed with a timetable"))
		}
		day, minute, err := parseBandwidthTime(when)
		if err != nil {
			return nil, bwTokenError(tok, err)
		}
		if strings.Contains(rate, ":") {
			return nil, bwTokenError(tok, errors.New("an upload:download rate pair is not supported (splatd only uploads); give one rate"))
		}
		r, err := parseBandwidthRate(rate)
		if err != nil {
			return nil, bwTokenError(tok, err)
		}
		entries = append(entries, bwEntry{day: day, minute: minute, rate: r})
	}
	return entries, nil
}

// layOutWeek lays the entries (fields[i] is entry i as written) out over
// the week, in order of start minute, neighbours with equal rates merged
// (the week wraps) so that the limiter only stops at real changes. A DAY
// entry overrides an every-day entry at the same minute, so the daily ones
// go in first; two entries of one kind at one minute are an error.
func layOutWeek(entries []bwEntry, fields []string) ([]bwSlot, error) {
	type placed struct {
		rate  int64
		daily bool
		tok   string
	}
	week := map[int]placed{}
	for _, daily := range []bool{true, false} {
		for i, e := range entries {
			if (e.day < 0) != daily {
				continue
			}
			days := []int{e.day}
			if daily {
				days = []int{0, 1, 2, 3, 4, 5, 6}
			}
			for _, d := range days {
				start := d*bwMinutesPerDay + e.minute
				if prev, ok := week[start]; ok && prev.daily == daily {
					return nil, bwTokenError(fields[i], fmt.Errorf("%s is also set by %q", e.when(), prev.tok))
				}
				week[start] = placed{rate: e.rate, daily: daily, tok: fields[i]}
			}
		}
	}
	slots := make([]bwSlot, 0, len(week))
	for start, p := range week {
		slots = append(slots, bwSlot{start: start, rate: p.rate})
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i].start < slots[j].start })
	merged := slots[:1]
	for _, sl := range slots[1:] {
		if sl.rate != merged[len(merged)-1].rate {
			merged = append(merged, sl)
		}
	}
	if len(merged) > 1 && merged[0].rate == merged[len(merged)-1].rate {
		merged = merged[1:]
	}
	return merged, nil
}

// bwTokenError names the token an error is about, unless the error does
// already (the caller names the key: "upload.bandwidth: ...").
func bwTokenError(tok string, err error) error {
	if strings.Contains(err.Error(), fmt.Sprintf("%q", tok)) {
		return err
	}
	return fmt.Errorf("%q: %w", tok, err)
}

// parseBandwidthTime parses [DAY-]HH:MM and returns the day (-1 for none)
// and the minute of the day.
func parseBandwidthTime(s string) (day, minute int, err error) {
	day = -1
	if name, hhmm, ok := strings.Cut(s, "-"); ok {
		day = -2
		for i, d := range bwDays {
			if strings.EqualFold(name, d) || strings.EqualFold(name, time.Weekday((i+1)%7).String()) {
				day = i
			}
		}
		if day == -2 {
			return 0, 0, fmt.Errorf("unknown day %q (want Mon, Tue, Wed, Thu, Fri, Sat or Sun)", name)
		}
		s = hhmm
	}
	hh, mm, ok := strings.Cut(s, ":")
	if !ok || len(hh) < 1 || len(hh) > 2 || len(mm) != 2 || !bwDigits(hh) || !bwDigits(mm) {
		return 0, 0, fmt.Errorf("time %q is not HH:MM", s)
	}
	h, _ := strconv.Atoi(hh)
	m, _ := strconv.Atoi(mm)
	if h > 23 || m > 59 {
		return 0, 0, fmt.Errorf("time %q is out of range (00:00 to 23:59)", s)
	}
	return day, h*60 + m, nil
}

func bwDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseBandwidthRate parses one rate; 0 means unlimited. Units follow the
// program's one rule (state.ParseSize); a non-zero rate must name one, since
// a bare number reads as bytes to some and bits to others.
func parseBandwidthRate(s string) (int64, error) {
	if strings.EqualFold(s, "off") {
		return 0, nil
	}
	s = strings.TrimSuffix(s, "/s")
	num := strings.TrimRight(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ")
	if num == "" || !strings.ContainsRune("0123456789.", rune(s[0])) {
		return 0, fmt.Errorf("rate %q does not start with a number (want e.g. 20MiB/s, 512k or off)", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("rate %q: %q is not a number", s, num)
	}
	if f == 0 {
		return 0, nil // 0 in any unit is off
	}
	if num == s {
		return 0, fmt.Errorf("rate %q has no unit (write e.g. %sKiB/s or %sMiB/s; 0 or off for no limit)", s, num, num)
	}
	r, err := state.ParseSize(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("rate %w", err)
	case r < 1:
		return 0, fmt.Errorf("rate %q is below 1 byte per second (use 0 or off for no limit)", s)
	case r > bwMaxRate:
		return 0, fmt.Errorf("rate %q is too large", s)
	}
	return r, nil
}

// At returns the limit in bytes per second at t (read in local time); 0
// means unlimited.
func (s Schedule) At(t time.Time) int64 {
	if s.slots == nil {
		return s.rate
	}
	return s.slots[s.slotAt(bwMinuteOfWeek(t.Local()))].rate
}

// Unlimited reports whether s never limits.
func (s Schedule) Unlimited() bool { return s.slots == nil && s.rate == 0 }

// String returns s in the syntax ParseBandwidth reads, with each rate in
// the largest unit that states it exactly: "off", "20MiB/s",
// "08:00,20MiB/s 19:00,off".
func (s Schedule) String() string {
	if s.entries == nil {
		return bwFormatRate(s.rate)
	}
	parts := make([]string, len(s.entries))
	for i, e := range s.entries {
		parts[i] = e.when() + "," + bwFormatRate(e.rate)
	}
	return strings.Join(parts, " ")
}

func (e bwEntry) when() string {
	hhmm := fmt.Sprintf("%02d:%02d", e.minute/60, e.minute%60)
	if e.day < 0 {
		return hhmm
	}
	return bwDays[e.day] + "-" + hhmm
}

func bwFormatRate(r int64) string {
	if r == 0 {
		return "off"
	}
	f := state.FormatSize(r)
	if strings.Trim(f, "0123456789") == "" {
		f += "B" // a bare number would read as "no unit"
	}
	return f + "/s"
}

// bwMinuteOfWeek counts minutes from Monday 00:00 on t's wall clock.
func bwMinuteOfWeek(t time.Time) int {
	return (int(t.Weekday())+6)%7*bwMinutesPerDay + t.Hour()*60 + t.Minute()
}

// slotAt returns the index of the slot covering minute m of the week; before
// the week's first slot, the last one still holds.
func (s Schedule) slotAt(m int) int {
	i := sort.Search(len(s.slots), func(i int) bool { return s.slots[i].start > m }) - 1
	if i < 0 {
		i = len(s.slots) - 1
	}
	return i
}

// next returns the first time after t at which the rate may change, and
// false when it never does.
func (s Schedule) next(t time.Time) (time.Time, bool) {
	if s.slots == nil {
		return time.Time{}, false
	}
	lt := t.Local()
	m := bwMinuteOfWeek(lt)
	i := sort.Search(len(s.slots), func(i int) bool { return s.slots[i].start > m })
	target := 0
	if i < len(s.slots) {
		target = s.slots[i].start
	} else {
		target = s.slots[0].start + bwMinutesPerWeek
	}
	// Build the boundary on the wall clock, so that a daylight-saving
	// change moves it with the clock on the wall.
	today := m / bwMinutesPerDay
	at := time.Date(lt.Year(), lt.Month(), lt.Day()+target/bwMinutesPerDay-today,
		target%bwMinutesPerDay/60, target%60, 0, 0, time.Local)
	if !at.After(t) {
		// A wall-clock time a DST change skipped or repeated: fall back to
		// elapsed minutes.
		at = lt.Truncate(time.Minute).Add(time.Duration(target-m) * time.Minute)
	}
	return at, true
}
