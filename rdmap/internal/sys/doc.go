// Package sys wraps the few system calls package rdmap needs beyond the
// standard library: TCP_MAXSEG of a connection (the MPA MULPDU is derived
// from it), the socket's pending error (SO_ERROR), readv(2) into
// registered memory for the receive engine's direct path, and anonymous
// memory mapped outside the Go heap with guard pages (for memory regions
// and buffer pools). Every call reaches a socket's file descriptor
// through syscall.Conn and RawConn, so the net package keeps ownership of
// the descriptor. It is internal to rdmap: the daemon maps its
// file-backed regions itself (internal/daemon, mapfile_linux.go).
//
// On systems other than Linux TCPMaxSeg and MapGuarded return
// errors.ErrUnsupported; Readv, Writev and SockError exist on every Unix (where
// golang.org/x/sys has no readv(2) or writev(2), they use the first non-empty
// buffer only: a short read or write, which every caller handles).
package sys
