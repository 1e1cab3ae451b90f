package api

import (
	"strings"
	"testing"
	"time"
)

// bwMonday is a Monday with no daylight-saving change in its week in either
// hemisphere; schedule tests read times in the local zone, as the daemon does.
var bwMonday = time.Date(2026, time.January, 12, 0, 0, 0, 0, time.Local)

// bwWeekTime returns day (0 = Monday) hh:mm:ss of bwMonday's week.
func bwWeekTime(day, hh, mm, ss int) time.Time {
	return time.Date(2026, time.January, 12+day, hh, mm, ss, 0, time.Local)
}

func TestParseBandwidth(t *testing.T) {
	t.Parallel()
	const (
		Ki = 1 << 10
		Mi = 1 << 20
		Gi = 1 << 30
	)
	tests := []struct {
		in   string
		want string // String() of the result
		rate int64  // At(any time), for constant schedules
	}{
		{"", "off", 0},
		{"0", "off", 0},
		{"off", "off", 0},
		{"OFF", "off", 0},
		{"0M", "off", 0},
		{"  50MiB/s ", "50MiB/s", 50 * Mi},
		{"20MB/s", "20MB/s", 20e6},
		{"512KiB/s", "512KiB/s", 512 * Ki},
		{"10M", "10MiB/s", 10 * Mi},
		{"10Mi", "10MiB/s", 10 * Mi},
		{"512k", "512KiB/s", 512 * Ki},
		{"512K/s", "512KiB/s", 512 * Ki},
		{"1.5M", "1536KiB/s", 1536 * Ki},
		{"1500kB/s", "1500kB/s", 1500e3},
		{"1500KB/s", "1500kB/s", 1500e3},
		{"100B/s", "100B/s", 100},
		{"2G", "2GiB/s", 2 * Gi},
		{"1GB/s", "1GB/s", 1e9},
		{"0.5GiB/s", "512MiB/s", 512 * Mi},
		{"2 MiB/s", "2MiB/s", 2 * Mi}, // a rate with a space, not a timetable
		// Timetables whose rate never changes collapse to a constant.
		{"monday-8:00,1M", "Mon-08:00,1MiB/s", 1 * Mi},
		{"08:00,1M 19:00,1024k", "08:00,1MiB/s 19:00,1MiB/s", 1 * Mi},
		{"08:00,off 19:00,0", "08:00,off 19:00,off", 0},
	}
	for _, tt := range tests {
		s, err := ParseBandwidth(tt.in)
		if err != nil {
			t.Errorf("ParseBandwidth(%q): %v", tt.in, err)
			continue
		}
		if got := s.String(); got != tt.want {
			t.Errorf("ParseBandwidth(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
		for _, at := range []time.Time{bwWeekTime(0, 0, 0, 0), bwWeekTime(2, 12, 0, 0), bwWeekTime(6, 23, 59, 59)} {
			if got := s.At(at); got != tt.rate {
				t.Errorf("ParseBandwidth(%q).At(%v) = %d, want %d", tt.in, at, got, tt.rate)
			}
		}
		if got, want := s.Unlimited(), tt.rate == 0; got != want {
			t.Errorf("ParseBandwidth(%q).Unlimited() = %v, want %v", tt.in, got, want)
		}
	}
}

func TestParseBandwidthErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, token, why string
	}{
		{"10", "10", "no unit"},
		{"fast", "fast", "does not start with a number"},
		{"-5M", "-5M", "does not start with a number"},
		{"1.2.3M", "1.2.3M", "not a number"},
		{"10Mb/s", "10Mb/s", "bits"},
		{"10X", "10X", "unknown unit"},
		{"10P", "10P", "unknown unit"},
		{"10MiBs", "10MiBs", "unknown unit"},
		{"0.1B/s", "0.1B/s", "below 1 byte"},
		{"99999999999G", "99999999999G", "too large"},
		{"10M:1M", "10M:1M", "rate pair"},
		{"08:00", "08:00", "TIME,RATE"},
		{"08:00,1M 20M", "20M", "cannot be mixed"},
		{"2 fast", "2 fast", "neither one rate"},
		{"08:00,1M 25:00,off", "25:00,off", "out of range"},
		{"08:60,1M", "08:60,1M", "out of range"},
		{"8:0,1M", "8:0,1M", "not HH:MM"},
		{"0800,1M", "0800,1M", "not HH:MM"},
		{"Fun-08:00,1M", "Fun-08:00,1M", "unknown day"},
		{"08:00,fast", "08:00,fast", "does not start with a number"},
		{"08:00,1M:2M", "08:00,1M:2M", "rate pair"},
		{"08:00,1M 19:00,off 08:00,2M", "08:00,2M", `also set by "08:00,1M"`},
		{"Sat-08:00,1M sat-08:00,2M", "sat-08:00,2M", "Sat-08:00 is also set"},
	}
	for _, tt := range tests {
		_, err := ParseBandwidth(tt.in)
		if err == nil {
			t.Errorf("ParseBandwidth(%q) = nil error, want one naming %q", tt.in, tt.token)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, `"`+tt.token+`"`) || !strings.Contains(msg, tt.why) {
			t.Errorf("ParseBandwidth(%q) error = %q, want it to name %q and say %q", tt.in, msg, tt.token, tt.why)
		}
	}
}

func TestScheduleAt(t *testing.T) {
	t.Parallel()
	const k, M = 512 << 10, 20 << 20
	tests := []struct {
		spec string
		at   time.Time
		want int64
	}{
		{"08:00,20MiB/s 19:00,off", bwWeekTime(0, 7, 59, 59), 0},
		{"08:00,20MiB/s 19:00,off", bwWeekTime(0, 8, 0, 0), M},
		{"08:00,20MiB/s 19:00,off", bwWeekTime(3, 18, 59, 59), M},
		{"08:00,20MiB/s 19:00,off", bwWeekTime(3, 19, 0, 0), 0},
		{"08:00,20MiB/s 19:00,off", bwWeekTime(6, 23, 59, 0), 0},
		// The week's last entry carries over into the next week.
		{"Mon-08:00,512k Sat-10:00,off", bwWeekTime(6, 12, 0, 0), 0},
		{"Mon-08:00,512k Sat-10:00,off", bwWeekTime(0, 7, 59, 0), 0},
		{"Mon-08:00,512k Sat-10:00,off", bwWeekTime(0, 8, 0, 0), k},
		{"Mon-08:00,512k Sat-10:00,off", bwWeekTime(2, 3, 0, 0), k},
		{"Mon-08:00,512k Sat-10:00,off", bwWeekTime(5, 9, 59, 59), k},
		{"Mon-08:00,512k Sat-10:00,off", bwWeekTime(5, 10, 0, 0), 0},
		{"Sat-10:00,off Mon-08:00,512k", bwWeekTime(6, 12, 0, 0), 0},
		{"Sat-10:00,off Mon-08:00,512k", bwWeekTime(1, 12, 0, 0), k},
		// An entry with a day overrides an every-day entry at its minute.
		{"08:00,20MiB/s 19:00,off Sat-08:00,off", bwWeekTime(5, 9, 0, 0), 0},
		{"08:00,20MiB/s 19:00,off Sat-08:00,off", bwWeekTime(4, 9, 0, 0), M},
		{"08:00,20MiB/s 19:00,off Sat-08:00,off", bwWeekTime(6, 9, 0, 0), M},
		{"Sat-08:00,off 08:00,20MiB/s 19:00,off", bwWeekTime(5, 9, 0, 0), 0},
		// Times in another zone are read on the local clock.
		{"08:00,20MiB/s 19:00,off", bwWeekTime(0, 9, 0, 0).UTC(), M},
	}
	for _, tt := range tests {
		s, err := ParseBandwidth(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.At(tt.at); got != tt.want {
			t.Errorf("%q.At(%s) = %d, want %d", tt.spec, tt.at.Local().Format("Mon 15:04:05"), got, tt.want)
		}
	}
}

func TestScheduleNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec     string
		at, want time.Time
	}{
		{"08:00,1M 19:00,off", bwWeekTime(0, 7, 0, 0), bwWeekTime(0, 8, 0, 0)},
		{"08:00,1M 19:00,off", bwWeekTime(0, 8, 0, 0), bwWeekTime(0, 19, 0, 0)},
		{"08:00,1M 19:00,off", bwWeekTime(0, 18, 59, 59), bwWeekTime(0, 19, 0, 0)},
		{"08:00,1M 19:00,off", bwWeekTime(0, 20, 0, 0), bwWeekTime(1, 8, 0, 0)},
		{"08:00,1M 19:00,off", bwWeekTime(6, 20, 0, 0), bwWeekTime(7, 8, 0, 0)},
		{"Mon-08:00,512k Sat-10:00,off", bwWeekTime(2, 0, 0, 0), bwWeekTime(5, 10, 0, 0)},
		{"Mon-08:00,512k Sat-10:00,off", bwWeekTime(6, 12, 0, 0), bwWeekTime(7, 8, 0, 0)},
		{"Mon-08:00,512k Sat-10:00,off", bwWeekTime(0, 1, 0, 0), bwWeekTime(0, 8, 0, 0)},
	}
	for _, tt := range tests {
		s, err := ParseBandwidth(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := s.next(tt.at)
		if !ok || !got.Equal(tt.want) {
			t.Errorf("%q.next(%s) = %s, %v; want %s", tt.spec, tt.at.Format("Mon 15:04"), got.Format("Mon Jan 2 15:04"), ok, tt.want.Format("Mon Jan 2 15:04"))
		}
	}
	if _, ok := (Schedule{rate: 1}).next(bwMonday); ok {
		t.Error("a constant schedule reports a next change")
	}
}

// TestScheduleStringRoundTrips: String is the input syntax, so a config
// shown on the status page can be pasted back.
func TestScheduleStringRoundTrips(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"off", "1.5M", "20MB/s", "123B/s", "08:00,20MiB/s 19:00,off", "Mon-08:00,512k Sat-10:00,off", "08:00,1M Sat-08:00,off 19:00,100kB/s"} {
		s, err := ParseBandwidth(in)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := ParseBandwidth(s.String())
		if err != nil {
			t.Fatalf("ParseBandwidth(%q) (String of %q): %v", s.String(), in, err)
		}
		if s2.String() != s.String() {
			t.Errorf("%q: String %q reparses as %q", in, s.String(), s2.String())
		}
		for m := 0; m < bwMinutesPerWeek; m += 30 {
			at := bwMonday.Add(time.Duration(m) * time.Minute)
			if s.At(at) != s2.At(at) {
				t.Errorf("%q: at %s, %d before the round trip, %d after", in, at.Format("Mon 15:04"), s.At(at), s2.At(at))
				break
			}
		}
	}
}
