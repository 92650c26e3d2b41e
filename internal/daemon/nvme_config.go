package daemon

import (
	"fmt"
	"net"

	"github.com/gosiw/gosiw/internal/nvmeof"
)

// DefaultNQN is the NQN of the subsystem made from the flags alone
// (--nvme-namespace), open to any host.
const DefaultNQN = "nqn.2026-01.dev.gosiw:siwd"

// NVMeSpec is the [nvme] section of the TOML config:
//
//	[nvme]
//	listen = "127.0.0.1:4420"        # NVMe-oF RDMA listener (empty: off)
//	namespaces = ["disk"]            # the default subsystem's namespaces
//	inline_data_size = 4096          # in-capsule data of I/O commands
//
//	[[nvme.subsystem]]
//	nqn = "nqn.2026-01.dev.example:vol1"
//	namespaces = ["disk", "logs"]    # region names: namespace 1, 2, ...
//	allowed_hosts = ["nqn.2014-08.org.nvmexpress:uuid:..."]  # empty: any
type NVMeSpec struct {
	Listen         string          `toml:"listen"`
	Namespaces     []string        `toml:"namespaces"`
	InlineDataSize int             `toml:"inline_data_size"`
	Subsystems     []SubsystemSpec `toml:"subsystem"`
}

// SubsystemSpec is one [[nvme.subsystem]].
type SubsystemSpec struct {
	NQN          string   `toml:"nqn"`
	Namespaces   []string `toml:"namespaces"`
	AllowedHosts []string `toml:"allowed_hosts"`
}

// NVMeConfig is the validated NVMe-oF configuration (nil in Config: off).
type NVMeConfig struct {
	Listen         string
	InlineDataSize int
	Subsystems     []SubsystemConfig
}

// SubsystemConfig is a validated subsystem: its namespaces are region
// names, namespace i+1 being Namespaces[i].
type SubsystemConfig struct {
	NQN          string
	Namespaces   []string
	AllowedHosts []string
}

// build validates the section against the configured regions.
func (s *NVMeSpec) build(regions []Region) (*NVMeConfig, error) {
	if s.Listen == "" {
		if len(s.Namespaces) > 0 || len(s.Subsystems) > 0 {
			return nil, fmt.Errorf("nvme: namespaces or subsystems without a listen address (--nvme-listen)")
		}
		return nil, nil
	}
	if _, _, err := net.SplitHostPort(s.Listen); err != nil {
		return nil, fmt.Errorf("nvme listen %q: %w", s.Listen, err)
	}
	if s.InlineDataSize < 0 || s.InlineDataSize%16 != 0 || s.InlineDataSize > 64<<10 {
		return nil, fmt.Errorf("nvme inline_data_size %d: want a multiple of 16 up to 65536", s.InlineDataSize)
	}
	c := &NVMeConfig{Listen: s.Listen, InlineDataSize: s.InlineDataSize}
	subs := s.Subsystems
	if len(s.Namespaces) > 0 {
		subs = append([]SubsystemSpec{{NQN: DefaultNQN, Namespaces: s.Namespaces}}, subs...)
	}
	if len(subs) == 0 {
		return nil, fmt.Errorf("nvme: listening without a namespace (--nvme-namespace or [[nvme.subsystem]])")
	}
	known := map[string]bool{}
	for _, r := range regions {
		known[r.Name] = true
	}
	seen := map[string]bool{}
	for _, ss := range subs {
		if ss.NQN == "" || len(ss.NQN) > nvmeof.MaxNQNLen || ss.NQN == nvmeof.DiscoveryNQN || seen[ss.NQN] {
			return nil, fmt.Errorf("nvme subsystem %q: NQN empty, too long, the discovery NQN, or defined twice", ss.NQN)
		}
		seen[ss.NQN] = true
		if len(ss.Namespaces) == 0 {
			return nil, fmt.Errorf("nvme subsystem %s: no namespaces", ss.NQN)
		}
		for _, n := range ss.Namespaces {
			if !known[n] {
				return nil, fmt.Errorf("nvme subsystem %s: no region named %q", ss.NQN, n)
			}
		}
		c.Subsystems = append(c.Subsystems, SubsystemConfig(ss))
	}
	return c, nil
}
