package rdmap

import "go.uber.org/zap"

// Config configures a Device. The zero value is valid.
type Config struct {
	// Logger receives lifecycle logs. nil means zap.NewNop().
	Logger *zap.Logger
}

// Device is a software RNIC: the factory of protection domains, memory
// regions, completion queues and queue pairs. It is safe for concurrent
// use.
type Device struct {
	lg *zap.Logger
}

// NewDevice returns a new software RNIC.
func NewDevice(cfg *Config) (*Device, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	lg := c.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	return &Device{lg: lg.Named("rdmap")}, nil
}

// Logger returns the device's logger.
func (d *Device) Logger() *zap.Logger { return d.lg }
