package main

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"unicode/utf8"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/rdmap"
)

// explain turns a connection error into a sentence a person can act on:
// unreachable, rejected (with the peer's private data and iw_cm's text),
// timed out, or terminated (layer/type/code by name).
func explain(addr string, err error) error {
	var rej *cm.RejectError
	var ce *cm.ConnectError
	var te *rdmap.TerminateError
	switch {
	case errors.As(err, &rej):
		return fmt.Errorf("rejected by %s: %s (%s)", addr, printable(rej.PrivateData),
			cm.RejectMsg(-int(syscall.ECONNREFUSED)))
	case errors.As(err, &te):
		who := "local side detected"
		if te.Remote {
			who = "peer sent"
		}
		return fmt.Errorf("terminated: %s %s/%s: %s", who, te.Layer, rdmap.ETypeName(te.Layer, te.EType),
			rdmap.CodeName(te.Layer, te.EType, te.Code))
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("unreachable: %s refused the TCP connection (is siwd or rping -s running there?)", addr)
	case errors.As(err, &ce):
		switch ce.Status {
		case cm.StatusTimeout:
			return fmt.Errorf("timed out: no MPA reply from %s (%s)", addr, cm.RejectMsg(int(ce.Status.Errno())))
		case cm.StatusReset:
			return fmt.Errorf("connection to %s closed during setup (%s): %v", addr, cm.RejectMsg(int(ce.Status.Errno())), ce.Err)
		}
		return fmt.Errorf("connect to %s failed: %v", addr, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("timed out talking to %s: %v", addr, err)
	}
	return err
}

// printable renders private data as text when it is text, else as hex.
func printable(b []byte) string {
	if len(b) == 0 {
		return "no private data"
	}
	if utf8.Valid(b) {
		ok := true
		for _, r := range string(b) {
			if r < 0x20 && r != '\t' {
				ok = false
				break
			}
		}
		if ok {
			return fmt.Sprintf("%q", string(b))
		}
	}
	return fmt.Sprintf("private data %x", b)
}
