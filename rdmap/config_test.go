package rdmap_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gosiw/gosiw/rdmap"
)

// TestConfigErrorsNameTheField checks that every refused configuration
// matches ErrConfig and says which field or parameter is wrong, with its
// value.
func TestConfigErrorsNameTheField(t *testing.T) {
	dev := newDevice(t)
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	qp := func(c rdmap.QPConfig) error {
		_, err := pd.CreateQP(&c)
		return err
	}
	good, err := pd.CreateQP(&rdmap.QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	for _, c := range []struct {
		name string
		err  error
		want []string // in the message
	}{
		{"nil QPConfig", func() error { _, err := pd.CreateQP(nil); return err }(), []string{"nil QPConfig"}},
		{"no SendCQ", qp(rdmap.QPConfig{RecvCQ: cq}), []string{"QPConfig.SendCQ"}},
		{"no RecvCQ", qp(rdmap.QPConfig{SendCQ: cq}), []string{"QPConfig.RecvCQ"}},
		{"MaxSendWR", qp(rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: -1}), []string{"QPConfig.MaxSendWR", "-1"}},
		{"MaxRecvWR", qp(rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxRecvWR: 1<<20 + 1}), []string{"QPConfig.MaxRecvWR", "1048577"}},
		{"MaxSendSGE", qp(rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendSGE: rdmap.MaxSGE + 1}), []string{"QPConfig.MaxSendSGE"}},
		{"MaxRecvSGE", qp(rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxRecvSGE: -2}), []string{"QPConfig.MaxRecvSGE", "-2"}},
		{"MaxInline", qp(rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxInline: rdmap.MaxInlineData + 1}), []string{"QPConfig.MaxInline"}},
		{"MaxIRD", qp(rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxIRD: rdmap.MaxIRDORD + 1}), []string{"QPConfig.MaxIRD"}},
		{"MaxORD", qp(rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxORD: -1}), []string{"QPConfig.MaxORD"}},
		{"PollRxIdle", qp(rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, PollRx: true, PollRxIdle: -time.Millisecond}), []string{"QPConfig.PollRxIdle", "-1ms"}},
		{"MaxULPDU", qp(rdmap.QPConfig{SendCQ: cq, RecvCQ: cq, MaxULPDU: 1}), []string{"QPConfig.MaxULPDU", " 1 "}},
		{"SRQ MaxWR", func() error { _, err := pd.CreateSRQ(&rdmap.SRQConfig{MaxWR: -1}); return err }(), []string{"SRQConfig.MaxWR", "-1"}},
		{"SRQ MaxSGE", func() error { _, err := pd.CreateSRQ(&rdmap.SRQConfig{MaxSGE: rdmap.MaxSGE + 1}); return err }(), []string{"SRQConfig.MaxSGE"}},
		{"CQ size", func() error { _, err := dev.CreateCQ(0); return err }(), []string{"CreateCQ", " 0 "}},
		{"Start", good.Start(nil, nil), []string{"Start", "nil connection"}},
		{"MsgPool", func() error { _, err := pd.NewMsgPool(0, 4, 0); return err }(), []string{"NewMsgPool", "size 0"}},
	} {
		if !errors.Is(c.err, rdmap.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", c.name, c.err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("%s: %q does not name %q", c.name, c.err, w)
			}
		}
	}
}
