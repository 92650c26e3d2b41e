package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
	"github.com/gosiw/gosiw/rdmap/wire"
)

// explain turns a connection error into a sentence a person can act on:
// unreachable, rejected (with the peer's private data and iw_cm's text),
// timed out, or terminated (layer/type/code by name). what names the
// service to look for at addr in the unreachable case.
func explain(addr, what string, err error) error {
	var rej *mpa.RejectedError
	var ce *cm.ConnectError
	var te *rdmap.TerminateError
	var he *mpa.HandshakeError
	switch {
	case errors.As(err, &he) && he.Raw != nil:
		return fmt.Errorf("not an iWARP peer: %s answered %s to an MPA Request", addr, textOrHex(bytes.TrimRight(he.Raw, "\r\n"), "that are not an MPA Reply"))
	case errors.As(err, &rej):
		return fmt.Errorf("rejected by %s (%s): %s", addr, cm.RejectMsg(-int(syscall.ECONNREFUSED)), printable(rej.Reply.PrivateData))
	case errors.As(err, &te):
		who := "this side detected an error and sent"
		if te.Remote {
			who = "the peer sent"
		}
		return fmt.Errorf("connection terminated: %s a Terminate: layer %s, type %s, code %s (%#02x)\n  (%v)",
			who, te.Layer, wire.ETypeName(te.Layer, te.EType), wire.CodeName(te.Layer, te.EType, te.Code), te.Code, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("unreachable: %s refused the TCP connection (is %s listening there?)", addr, what)
	case errors.As(err, &ce):
		msg := cm.RejectMsg(-int(ce.Status.Errno()))
		switch ce.Status {
		case cm.StatusTimeout:
			return fmt.Errorf("timed out: no MPA Reply from %s in time (%s): is it an iWARP responder, and the address right?", addr, msg)
		case cm.StatusUnreachable:
			return fmt.Errorf("unreachable: cannot connect to %s: %v", addr, ce.Err)
		case cm.StatusReset:
			return fmt.Errorf("%s closed the connection during the MPA handshake (%s): is it an iWARP responder?", addr, msg)
		}
		return fmt.Errorf("connecting to %s failed (%v, %s): %v", addr, ce.Status, msg, ce.Err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("timed out talking to %s: %v", addr, err)
	}
	return err
}

// printable renders private data as quoted text, or hex when it is not text.
func printable(b []byte) string {
	if len(b) == 0 {
		return "no private data"
	}
	return textOrHex(b, "of private data")
}

// textOrHex renders b as quoted text when it is printable, else as
// "N bytes <what>: hex".
func textOrHex(b []byte, what string) string {
	if isText(b) {
		return strconv.Quote(string(b))
	}
	if what != "" {
		what = " " + what
	}
	return fmt.Sprintf("%d bytes%s: %x", len(b), what, b)
}

// isText: b is valid UTF-8 with only printable characters.
func isText(b []byte) bool {
	return len(b) > 0 && utf8.Valid(b) && strings.IndexFunc(string(b), func(r rune) bool { return !unicode.IsPrint(r) }) < 0
}

// splitHostPort checks a HOST:PORT argument to connect to: a bad one is a
// usage error ("port 70000: want a number from 1 to 65535"), found before
// anything connects, never reported as "unreachable".
func splitHostPort(addr string) (host string, port int, err error) {
	return parseHostPort(addr, 1)
}

// parseHostPort checks HOST:PORT with a port from minPort (0 for an
// address to listen on: any port) to 65535.
func parseHostPort(addr string, minPort int) (host string, port int, err error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not HOST:PORT (an IPv6 address goes in brackets: [::1]:7174)", addr)
	}
	n, err := strconv.Atoi(ps)
	if err != nil || n < minPort || n > 65535 {
		return "", 0, fmt.Errorf("%q: port %q: want a number from %d to 65535", addr, ps, minPort)
	}
	return host, n, nil
}
