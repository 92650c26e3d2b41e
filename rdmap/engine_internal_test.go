package rdmap

import "testing"

func TestMaskedAdd(t *testing.T) {
	for _, c := range []struct{ x, y, mask, want uint64 }{
		{1, 2, 0, 3},
		{^uint64(0), 1, 0, 0},
		{0x00000001_ffffffff, 0x00000001_00000001, 0x80000000_80000000, 0x00000002_00000000},
		{0xff, 0x01, 0x80, 0x00},
		{0xff, 0x01, 0x8000, 0x100},
	} {
		if got := maskedAdd(c.x, c.y, c.mask); got != c.want {
			t.Errorf("maskedAdd(%#x, %#x, %#x) = %#x, want %#x", c.x, c.y, c.mask, got, c.want)
		}
	}
}

func TestStateTransitions(t *testing.T) {
	legal := map[[2]QPState]bool{
		{StateIdle, StateRTR}: true, {StateIdle, StateRTS}: true, {StateIdle, StateError}: true,
		{StateRTR, StateRTS}: true, {StateRTR, StateError}: true,
		{StateRTS, StateClosing}: true, {StateRTS, StateTerminate}: true, {StateRTS, StateError}: true,
		{StateClosing, StateTerminate}: true, {StateClosing, StateError}: true,
		{StateTerminate, StateError}: true,
	}
	for from := StateIdle; from <= StateError; from++ {
		for to := StateIdle; to <= StateError; to++ {
			if got := legalTransition(from, to); got != legal[[2]QPState{from, to}] {
				t.Errorf("%v -> %v legal = %v", from, to, got)
			}
		}
	}
	qp := &QP{state: StateError}
	func() {
		defer func() {
			if r := recover(); r == nil && debugChecks {
				t.Error("illegal transition did not panic in a race build")
			}
		}()
		if err := qp.setStateLocked(StateRTS); err == nil {
			t.Error("ERROR -> RTS allowed")
		}
	}()
}
