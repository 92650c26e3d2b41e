package size

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "4096": 4096, "1K": 1024, "1k": 1024, "1KB": 1024, "1KiB": 1024, "64MiB": 64 << 20,
		"1G": 1 << 30, "2gb": 2 << 30, " 3 M": 3 << 20, "1T": 1 << 40, "10B": 10, "10b": 10,
		"8388607T": 8388607 << 40,
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"": "missing", "-1": "whole number", "1.5K": "unknown unit", "1X": "unknown unit", "G": "whole number",
		"8388608T": "too large", "99999999999999999999": "too large", "1KK": "unknown unit",
	} {
		_, err := Parse(in)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("Parse(%q) = %v, want an error with %q", in, err, why)
		}
	}
}

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1000: "1000", 1024: "1K", 64 << 20: "64M", 3 << 30: "3G", 1 << 40: "1T", 1536: "1536"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
		if back, err := Parse(Format(n)); err != nil || back != n {
			t.Errorf("Parse(Format(%d)) = %d, %v", n, back, err)
		}
	}
}

func TestValue(t *testing.T) {
	v := Value{N: 7, Min: 1, Max: 64 << 20}
	for in, why := range map[string]string{"-5": "negative", "0": "at least 1", "2G": "at most 64M", "x": "whole number"} {
		if err := v.Set(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("Set(%q) = %v, want an error with %q", in, err, why)
		}
	}
	if v.N != 7 {
		t.Errorf("a refused Set changed N to %d", v.N)
	}
	if err := v.Set("64M"); err != nil || v.N != 64<<20 || v.String() != "64M" {
		t.Errorf("Set(64M): %v, N %d, String %q", err, v.N, v.String())
	}
	u := Value{}
	if err := u.Set("8388607T"); err != nil || u.N != 8388607<<40 {
		t.Errorf("unbounded Set: %v %d", err, u.N)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "64K", "1GiB", " 3 m", "1.5K", "-1", "8388608T"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("Parse(%q) = %d", s, n)
		}
		if back, err := Parse(Format(n)); err != nil || back != n {
			t.Fatalf("Parse(Format(%d)) = %d, %v", n, back, err)
		}
	})
}
