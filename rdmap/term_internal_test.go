package rdmap

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/gosiw/gosiw/ddp"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// TestTermFor: every MPA and DDP error of the receive path maps to the
// Terminate RFC 5044/5041 and siw give it, with the header copied only
// where siw copies it; other errors map to nothing.
func TestTermFor(t *testing.T) {
	var rx rxEngine
	rx.cur.ulpduLen, rx.cur.ddpHdrLen = 40, ddp.TaggedHeaderLen
	for i := range rx.cur.hdr {
		rx.cur.hdr[i] = byte(i + 1)
	}
	cases := []struct {
		err         error
		layer       wire.Layer
		etype, code uint8
		hdr         bool
		cause       error
	}{
		{mpa.ErrBadCRC, wire.LayerLLP, mpa.TermTypeMPA, uint8(mpa.TermCRC), false, mpa.ErrBadCRC},
		{fmt.Errorf("wrapped: %w", mpa.ErrBadCRC), wire.LayerLLP, mpa.TermTypeMPA, uint8(mpa.TermCRC), false, mpa.ErrBadCRC},
		{errShortULPDU, wire.LayerLLP, mpa.TermTypeMPA, uint8(mpa.TermMarker), false, errShortULPDU},
		{io.ErrUnexpectedEOF, wire.LayerLLP, mpa.TermTypeMPA, uint8(mpa.TermTCPClosed), false, errTruncated},
		{ErrRxStalled, wire.LayerLLP, mpa.TermTypeMPA, uint8(mpa.TermTCPClosed), false, ErrRxStalled},
		{&ddp.Error{Type: ddp.ErrTypeTagged, Code: ddp.CodeInvalidSTag}, wire.LayerDDP, 1, 0, true, nil},
		{&ddp.Error{Type: ddp.ErrTypeUntagged, Code: ddp.CodeMSNRange}, wire.LayerDDP, 2, 3, true, nil},
		{&ddp.Error{Type: ddp.ErrTypeTagged, Code: ddp.CodeTaggedVersion}, wire.LayerDDP, 1, 4, false, nil},
		{&ddp.Error{Type: ddp.ErrTypeUntagged, Code: ddp.CodeUntaggedVersion}, wire.LayerDDP, 2, 6, false, nil},
	}
	for _, c := range cases {
		ti := rx.termFor(c.err)
		if ti == nil {
			t.Fatalf("%v: no Terminate", c.err)
		}
		if ti.layer != c.layer || ti.etype != c.etype || ti.code != c.code || ti.m != c.hdr || (ti.ddpLen > 0) != c.hdr || ti.hasRDMA {
			t.Errorf("%v: %+v, want layer %v type %d code %d header %v", c.err, ti, c.layer, c.etype, c.code, c.hdr)
		}
		if c.hdr && (ti.ddpLen != ddp.TaggedHeaderLen || ti.ddpHdr[0] != rx.cur.hdr[mpa.LengthFieldLen] || ti.ulpduLen != 40) {
			t.Errorf("%v: header copy %x (%d bytes), ULPDU length %d", c.err, ti.ddpHdr[:ti.ddpLen], ti.ddpLen, ti.ulpduLen)
		}
		if ti.cause != c.cause {
			t.Errorf("%v: cause %v, want %v", c.err, ti.cause, c.cause)
		}
	}
	for _, err := range []error{nil, io.EOF, errors.New("other"), errCut} {
		if ti := rx.termFor(err); ti != nil {
			t.Errorf("%v: Terminate %+v, want none", err, ti)
		}
	}
}
