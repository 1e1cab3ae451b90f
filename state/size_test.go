package state

import "testing"

func TestParseSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"0": 0, "1048576": 1 << 20, "1KiB": 1 << 10, "1k": 1 << 10, "1K": 1 << 10, "1Ki": 1 << 10, "1kB": 1000,
		"1KB": 1000, "20GiB": 20 << 30, "5MB": 5e6, "10M": 10 << 20, "1.5MiB": 3 << 19, "2 TiB": 2 << 40,
		"3T": 3 << 40, "512B": 512, " 7 ": 7,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "KiB", "1 apple", "1e3", "10Mb", "1kb", "1b", "5mib", "1PiB", "99999999999T"} {
		if n, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, n)
		}
	}
}

func TestFormatSize(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{
		0: "0", 1: "1", 1 << 10: "1KiB", 1536 << 10: "1536KiB", 20 << 30: "20GiB", 5e6: "5MB", 1000: "1kB", 1000001: "1000001",
	} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if n > 0 {
			if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
				t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, back, err)
			}
		}
	}
}

func TestHumanSize(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 89938168: "85.8 MiB", 5 << 30: "5.0 GiB"} {
		if got := HumanSize(n); got != want {
			t.Errorf("HumanSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestOutsideBounds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		size, min, max int64
		outside        bool
	}{
		{0, 0, 0, false}, {1 << 40, 0, 0, false}, // no bounds
		{1 << 20, 0, 1 << 20, false}, {1<<20 + 1, 0, 1 << 20, true}, // max_size is inclusive
		{1023, 1024, 0, true}, {1024, 1024, 0, false}, // min_size is inclusive
		{5, 10, 20, true}, {15, 10, 20, false}, {25, 10, 20, true},
	} {
		got := OutsideBounds(tt.size, tt.min, tt.max)
		if (got != "") != tt.outside {
			t.Errorf("OutsideBounds(%d, %d, %d) = %q, want outside %v", tt.size, tt.min, tt.max, got, tt.outside)
		}
	}
	if got, want := OutsideBounds(3<<20, 0, 1<<20), "above the size bound max_size 1.0 MiB (1048576 bytes)"; got != want {
		t.Errorf("wording %q, want %q", got, want)
	}
	if got, want := OutsideBounds(1, 1024, 0), "below the size bound min_size 1.0 KiB (1024 bytes)"; got != want {
		t.Errorf("wording %q, want %q", got, want)
	}
}
