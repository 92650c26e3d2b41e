package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Access is what clients may do to an exported region.
type Access uint8

const (
	AccessRead  Access = 1 << iota // remote read
	AccessWrite                    // remote write
)

func (a Access) String() string {
	switch a {
	case AccessRead:
		return "r"
	case AccessWrite:
		return "w"
	case AccessRead | AccessWrite:
		return "rw"
	}
	return "none"
}

// ParseAccess parses "r", "w" or "rw".
func ParseAccess(s string) (Access, error) {
	switch s {
	case "r":
		return AccessRead, nil
	case "w":
		return AccessWrite, nil
	case "rw", "wr":
		return AccessRead | AccessWrite, nil
	}
	return 0, fmt.Errorf("access %q: want r, w or rw", s)
}

// RegionSpec describes an exported memory region.
type RegionSpec struct {
	Name   string `toml:"name"`
	Size   string `toml:"size"` // "64MiB", "1G", "4096"
	File   string `toml:"file"` // empty: anonymous memory
	Access string `toml:"access"`
}

// Region is a validated RegionSpec.
type Region struct {
	Name   string
	Size   int64
	File   string
	Access Access
}

// ConfigSpec is siwd's configuration as read from a TOML file; flags given
// on the command line override it.
type ConfigSpec struct {
	Listen            string       `toml:"listen"`
	Allow             []string     `toml:"allow"`
	MaxConns          int          `toml:"max_conns"`
	MaxConnsPerClient int          `toml:"max_conns_per_client"`
	Metrics           *string      `toml:"metrics"` // nil: DefaultMetrics; "": off
	Regions           []RegionSpec `toml:"region"`
	LogFormat         string       `toml:"log_format"`
	LogLevel          string       `toml:"log_level"`
	ShutdownTimeout   string       `toml:"shutdown_timeout"`
	NVMe              NVMeSpec     `toml:"nvme"`
}

// Config is siwd's validated runtime configuration.
type Config struct {
	Listen            string
	Allow             []netip.Prefix
	MaxConns          int
	MaxConnsPerClient int
	Metrics           string
	Regions           []Region
	LogFormat         string
	LogLevel          string
	ShutdownTimeout   time.Duration
	NVMe              *NVMeConfig // nil: no NVMe-oF target
}

// Defaults.
const (
	DefaultListen          = "127.0.0.1:7174"
	DefaultMetrics         = "127.0.0.1:9174"
	DefaultShutdownTimeout = 10 * time.Second
)

// LoadSpec reads a TOML config file.
func LoadSpec(path string) (*ConfigSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s ConfigSpec
	md, err := toml.Decode(string(b), &s)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, fmt.Errorf("config %s: unknown keys %v", path, und)
	}
	return &s, nil
}

// Build validates s and fills defaults.
func (s *ConfigSpec) Build() (*Config, error) {
	c := &Config{
		Listen:            s.Listen,
		MaxConns:          s.MaxConns,
		MaxConnsPerClient: s.MaxConnsPerClient,
		LogFormat:         s.LogFormat,
		LogLevel:          s.LogLevel,
		ShutdownTimeout:   DefaultShutdownTimeout,
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	c.Metrics = DefaultMetrics
	if s.Metrics != nil {
		c.Metrics = *s.Metrics
	}
	if c.LogFormat == "" {
		c.LogFormat = "console"
	}
	if c.LogFormat != "console" && c.LogFormat != "json" {
		return nil, fmt.Errorf("log format %q: want console or json", c.LogFormat)
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if s.MaxConns < 0 || s.MaxConnsPerClient < 0 {
		return nil, errors.New("connection limits must not be negative")
	}
	if s.ShutdownTimeout != "" {
		d, err := time.ParseDuration(s.ShutdownTimeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("shutdown timeout %q: want a positive duration", s.ShutdownTimeout)
		}
		c.ShutdownTimeout = d
	}
	allow, err := ParseAllow(s.Allow)
	if err != nil {
		return nil, err
	}
	c.Allow = allow
	seen := map[string]bool{}
	for _, rs := range s.Regions {
		r, err := rs.Build()
		if err != nil {
			return nil, err
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("region %q defined twice", r.Name)
		}
		seen[r.Name] = true
		c.Regions = append(c.Regions, r)
	}
	if c.NVMe, err = s.NVMe.build(c.Regions); err != nil {
		return nil, err
	}
	return c, nil
}

// ParseAllow parses CIDRs (a bare address means that one host).
func ParseAllow(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("allow %q: not a CIDR or address", s)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Build validates a region spec.
func (rs RegionSpec) Build() (Region, error) {
	r := Region{Name: rs.Name, File: rs.File}
	if rs.Name == "" || len(rs.Name) > 64 || strings.ContainsAny(rs.Name, " \t\n,=") {
		return r, fmt.Errorf("region name %q: want 1-64 characters without spaces, ',' or '='", rs.Name)
	}
	n, err := ParseSize(rs.Size)
	if err != nil {
		return r, fmt.Errorf("region %s: %w", rs.Name, err)
	}
	r.Size = n
	acc := rs.Access
	if acc == "" {
		acc = "rw"
	}
	if r.Access, err = ParseAccess(acc); err != nil {
		return r, fmt.Errorf("region %s: %w", rs.Name, err)
	}
	return r, nil
}

// ParseRegionFlag parses --region name=NAME,size=SIZE[,file=PATH],access=r|w|rw.
func ParseRegionFlag(s string) (RegionSpec, error) {
	var rs RegionSpec
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return rs, fmt.Errorf("region %q: %q is not key=value", s, kv)
		}
		switch k {
		case "name":
			rs.Name = v
		case "size":
			rs.Size = v
		case "file":
			rs.File = v
		case "access":
			rs.Access = v
		default:
			return rs, fmt.Errorf("region %q: unknown key %q", s, k)
		}
	}
	return rs, nil
}

// ParseSize parses a byte size: a number with an optional K, M, G, T
// suffix (powers of 1024; "KiB", "KB", "k" all mean 1024).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("size is missing")
	}
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') {
		i--
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "ib"), "b")
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number with an optional K, M, G or T suffix", s)
	}
	shift := map[string]uint{"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[unit]
	if _, ok := map[string]bool{"": true, "k": true, "m": true, "g": true, "t": true}[unit]; !ok {
		return 0, fmt.Errorf("size %q: unknown unit", s)
	}
	if n > (1<<62)>>shift {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n << shift, nil
}
