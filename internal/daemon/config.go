package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/gosiw/gosiw/internal/proto"
	"github.com/gosiw/gosiw/internal/size"
)

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
	Access proto.Access
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

	// Admission, budgets and idle connections (see Config).
	MaxHandshakes          int    `toml:"max_handshakes"`
	MaxHandshakesPerClient int    `toml:"max_handshakes_per_client"`
	RefusedRequestTimeout  string `toml:"refused_request_timeout"`
	MemoryBudget           string `toml:"memory_budget"`   // a size: "256MiB"
	MemoryPerConn          string `toml:"memory_per_conn"` // a size: "128MiB"
	IdleTimeout            string `toml:"idle_timeout"`    // "" or "0": none
	TCPKeepAlive           string `toml:"tcp_keepalive"`   // "off", or the idle time before probes

	// LockMemory mlocks every exported region (anonymous and file-backed)
	// when siwd starts, so that region pages are never swapped out; it needs
	// RLIMIT_MEMLOCK (LimitMEMLOCK in the systemd unit) at least the sum of
	// the region sizes, or CAP_IPC_LOCK.
	LockMemory bool `toml:"lock_memory"`

	// NVMe configures the NVMe-oF target (see NVMeSpec).
	NVMe NVMeSpec `toml:"nvme"`
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

	// MaxHandshakes bounds the MPA handshakes of allowed clients in
	// progress at once (more wait in the kernel's accept queue). 0 means
	// cm.DefaultMaxHandshakes.
	MaxHandshakes int
	// MaxHandshakesPerClient bounds the MPA handshakes in progress (TCP
	// accepted, Request not yet complete) from one client address; more
	// are closed at once. 0 means DefaultMaxHandshakesPerClient.
	MaxHandshakesPerClient int
	// RefusedRequestTimeout is how long a connection from a source the
	// rules refuse (outside Allow, or at a connection cap when TCP
	// accepts) has to send its MPA Request, so that it is answered with
	// its reason; such handshakes never hold a slot an allowed client
	// needs. 0 means DefaultRefusedRequestTimeout.
	RefusedRequestTimeout time.Duration
	// MemoryBudget bounds the memory that connections map for their
	// buffers (perf's, rping's), all together; a request that would go
	// past it is rejected with a readable reason. Exported regions are
	// not part of it. 0 means DefaultMemoryBudget.
	MemoryBudget int64
	// MemoryPerConn bounds the memory one connection maps for its
	// buffers (at most MemoryBudget). 0 means DefaultMemoryPerConn.
	MemoryPerConn int64
	// IdleTimeout, when positive, disconnects an established connection
	// that has carried no FPDU either way for that long (it is noticed
	// between once and twice that time after the last one). 0: no limit.
	IdleTimeout time.Duration
	// TCPKeepAlive is the idle time before TCP keepalive probes on
	// accepted connections (then probes every TCPKeepAlive, 9 of them):
	// 0 means Go's default, 15 s; negative turns keepalive off.
	TCPKeepAlive time.Duration
	// LockMemory mlocks every exported region: see ConfigSpec.LockMemory.
	LockMemory bool
	// NVMe is the NVMe-oF target's configuration; nil: no target.
	NVMe *NVMeConfig
}

// Defaults.
const (
	DefaultListen          = "127.0.0.1:7174"
	DefaultMetrics         = "127.0.0.1:9174"
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultMaxHandshakesPerClient is Config.MaxHandshakesPerClient's
	// default.
	DefaultMaxHandshakesPerClient = 16
	// DefaultRefusedRequestTimeout is Config.RefusedRequestTimeout's
	// default.
	DefaultRefusedRequestTimeout = time.Second
	// DefaultMemoryBudget is Config.MemoryBudget's default: what a small
	// machine can spare.
	DefaultMemoryBudget = 256 << 20
	// DefaultMemoryPerConn is Config.MemoryPerConn's default: a perf
	// test of the largest message (perf.MaxSize, 64 MiB) fits.
	DefaultMemoryPerConn = 128 << 20
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
		LockMemory:        s.LockMemory,
	}
	c.MaxHandshakes, c.MaxHandshakesPerClient = s.MaxHandshakes, s.MaxHandshakesPerClient
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
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", c.LogLevel)
	}
	if s.MaxConns < 0 || s.MaxConnsPerClient < 0 || s.MaxHandshakes < 0 || s.MaxHandshakesPerClient < 0 {
		return nil, errors.New("connection limits must not be negative")
	}
	for _, b := range []struct {
		v    string
		to   *int64
		name string
	}{{s.MemoryBudget, &c.MemoryBudget, "memory budget"}, {s.MemoryPerConn, &c.MemoryPerConn, "memory per connection"}} {
		if b.v == "" {
			continue
		}
		n, err := ParseSize(b.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.name, err)
		}
		*b.to = n
	}
	if s.IdleTimeout != "" {
		d, err := time.ParseDuration(s.IdleTimeout)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("idle timeout %q: want a duration (0: none)", s.IdleTimeout)
		}
		c.IdleTimeout = d
	}
	switch s.TCPKeepAlive {
	case "":
	case "off":
		c.TCPKeepAlive = -1
	default:
		d, err := time.ParseDuration(s.TCPKeepAlive)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("tcp keepalive %q: want off or a positive duration", s.TCPKeepAlive)
		}
		c.TCPKeepAlive = d
	}
	if s.RefusedRequestTimeout != "" {
		d, err := time.ParseDuration(s.RefusedRequestTimeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("refused request timeout %q: want a positive duration", s.RefusedRequestTimeout)
		}
		c.RefusedRequestTimeout = d
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
	if r.Access, err = proto.ParseAccess(acc); err != nil {
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

// ParseSize parses a region size with the one size parser every gosiw
// command uses (internal/size: K, M, G, T are powers of 1024) and wants
// it positive.
func ParseSize(s string) (int64, error) {
	n, err := size.Parse(s)
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive size", s)
	}
	return n, nil
}
