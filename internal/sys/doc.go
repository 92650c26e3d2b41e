// Package sys wraps the few system calls gosiw needs beyond the standard
// library: TCP_MAXSEG of a connection (the MPA MULPDU is derived from it)
// and anonymous memory mapped outside the Go heap with guard pages (for
// memory regions and buffer pools), and files mapped shared (siwd's
// file-backed regions). Every call reaches a socket's file
// descriptor through syscall.Conn and RawConn.Control, so the net package
// keeps ownership of the descriptor.
//
// On systems other than Linux the functions return errors.ErrUnsupported.
package sys
