package state

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Sizes have one unit rule in the whole program — config keys (max_size,
// upload.bandwidth), command flags (sim -part-size) and every figure
// printed: K, M, G, T alone and KiB, MiB, GiB, TiB are powers of 1024 (as in
// rclone: 10M is 10 MiB); kB, MB, GB, TB are powers of 1000 (as S3 and
// curl write them); B or no unit is bytes. A lower-case b is bits, which no
// setting of splatd counts, so it is an error rather than a silent 8× slip.

var sizeUnits = map[string]float64{
	"": 1, "B": 1,
	"K": 1 << 10, "KI": 1 << 10, "KIB": 1 << 10, "KB": 1e3,
	"M": 1 << 20, "MI": 1 << 20, "MIB": 1 << 20, "MB": 1e6,
	"G": 1 << 30, "GI": 1 << 30, "GIB": 1 << 30, "GB": 1e9,
	"T": 1 << 40, "TI": 1 << 40, "TIB": 1 << 40, "TB": 1e12,
}

// ParseSize reads a size such as 1048576, 512KiB, 10M, 20GiB or 5MB.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.TrimSpace(s[i:])
	f, err := strconv.ParseFloat(num, 64)
	if num == "" || err != nil {
		return 0, fmt.Errorf("%q is not a size (want e.g. 0, 512KiB, 10M, 20GiB or 5MB)", s)
	}
	if strings.HasSuffix(unit, "b") {
		return 0, fmt.Errorf("%q: a lower-case b reads as bits; sizes are in bytes (write B, e.g. %sMB or %sMiB)", s, num, num)
	}
	mult, ok := sizeUnits[strings.ToUpper(unit)]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q (want B, K/KiB, M/MiB, G/GiB, T/TiB, kB, MB, GB or TB)", s, unit)
	}
	v := math.Round(f * mult)
	if v > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(v), nil
}

// FormatSize writes n in the largest unit that states it exactly, in the
// syntax ParseSize reads: 20GiB, 5MB, 1536KiB, 1000001.
func FormatSize(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}, {1e12, "TB"}, {1e9, "GB"}, {1e6, "MB"}, {1e3, "kB"}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

// HumanSize writes n for a person to read, to one decimal in binary units:
// 512 B, 1.5 KiB, 85.8 MiB.
func HumanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// OutsideBounds says why size is outside a watch entry's min_size and
// max_size (0: no bound), "" when it is inside: the one verdict for the
// watcher's files and for the bundles of unbundled SOG folders, whose
// meta.json alone says nothing of what is published.
func OutsideBounds(size, minSize, maxSize int64) string {
	switch {
	case size < minSize:
		return fmt.Sprintf("below the size bound min_size %s (%d bytes)", HumanSize(minSize), minSize)
	case maxSize > 0 && size > maxSize:
		return fmt.Sprintf("above the size bound max_size %s (%d bytes)", HumanSize(maxSize), maxSize)
	}
	return ""
}
