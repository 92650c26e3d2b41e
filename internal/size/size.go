// Package size is the one parser of byte counts that every gosiw command
// and siwd's configuration use: a decimal number with an optional unit K,
// M, G or T, each a power of 1024 ("64K", "64KiB", "64kb" and "65536" are
// the same size).
package size

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrMissing is returned for an empty string.
var ErrMissing = errors.New("size is missing")

var shifts = map[string]uint{"": 0, "k": 10, "m": 20, "g": 30, "t": 40}

// Parse reads a byte count: digits, optional spaces, then an optional unit
// (K, M, G, T, optionally followed by "iB" or "B", any case). Negative
// numbers, fractions, unknown units and counts above math.MaxInt64 are
// errors that say what is wanted. Zero is accepted: callers with a lower
// bound use a Value or check it themselves.
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, ErrMissing
	}
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q: want a whole number of bytes with an optional K, M, G or T suffix", s)
	}
	if unit != "b" {
		unit = strings.TrimSuffix(strings.TrimSuffix(unit, "b"), "i")
	} else {
		unit = ""
	}
	shift, ok := shifts[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (want K, M, G or T, powers of 1024)", s, t[i:])
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n << shift, nil
}

// Format writes n in the largest unit that divides it exactly ("64K",
// "1G", "1000"), the inverse of Parse.
func Format(n int64) string {
	for _, u := range []struct {
		s     string
		shift uint
	}{{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

// Value is a size flag (pflag.Value) with bounds, checked as the flag is
// parsed, so that a bad value is a usage error before the command does
// anything. The zero Value accepts 0 to math.MaxInt64.
type Value struct {
	N        int64 // the value; set it to the default before parsing
	Min, Max int64 // bounds, inclusive; Max 0: no upper bound
}

// String formats N (empty for 0, so that help shows no default).
func (v *Value) String() string {
	if v.N == 0 {
		return ""
	}
	return Format(v.N)
}

// Type names the flag's kind in help output.
func (v *Value) Type() string { return "size" }

// Set parses s and checks the bounds.
func (v *Value) Set(s string) error {
	if strings.HasPrefix(strings.TrimSpace(s), "-") {
		return fmt.Errorf("size %q: must not be negative", s)
	}
	n, err := Parse(s)
	if err != nil {
		return err
	}
	if n < v.Min {
		return fmt.Errorf("size %q: want at least %s", s, Format(v.Min))
	}
	if v.Max > 0 && n > v.Max {
		return fmt.Errorf("size %q: want at most %s (%d bytes)", s, Format(v.Max), v.Max)
	}
	v.N = n
	return nil
}
