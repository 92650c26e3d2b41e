// Package nvmeof is NVMe over Fabrics on the RDMA transport, over gosiw's
// verbs (package rdmap) and connection manager (package cm): a target that
// siwd runs, and a small host for tests and for the siw tool. It speaks
// what the Linux kernel's nvme-rdma host and nvmet-rdma target speak
// (include/linux/nvme.h, include/linux/nvme-rdma.h).
//
// # Transport binding
//
// Each host queue (admin queue 0, I/O queues 1..n) is one connection. The
// host's MPA Request carries the CM request record (CMRequest: record
// format 0, queue id, host receive queue size, 0-based host submission
// queue size); the target answers with the accept record (CMReply: its
// receive queue size) or refuses with the reject record (CMReject: one of
// the CM* status codes). Then:
//
//	host                                     target
//	Send: command capsule (64-byte SQE    →  one receive buffer per SQ slot
//	      [+ in-capsule data, I/O only])
//	                                      ←  RDMA Write to the host's keyed
//	                                         SGL (data to the host), or
//	RDMA Read Response                    ←  RDMA Read Request (data from
//	                                         the host)
//	                                      ←  Send or Send with Invalidate:
//	                                         16-byte completion (CQE)
//
// The SQE's data pointer is one SGL descriptor (SGL): a keyed data block
// (type 0x40, or 0x4f asking the target to invalidate the key with the
// completion) or, for I/O commands that write, an in-capsule data block
// (type 0x01, offset 0) of at most Config.InlineDataSize bytes
// (Identify's IOCCSZ says how much).
//
// # Target
//
// Target (target.go) answers the connection requests; every queue runs on
// a goroutine of its own (queue.go) that polls its CQ: receives are
// commands, Read completions finish host writes, Send completions free
// the command's slot. The data of host reads and writes moves by RDMA
// straight between the host's memory and the namespace's (registered once
// with local access only): no copy. A controller (admin.go) is made by
// the admin queue's Connect and holds CC/CSTS, the Keep Alive timer, the
// features and the held Asynchronous Event Requests; it ends with its
// admin queue and takes its I/O queues with it. The discovery subsystem
// (DiscoveryNQN) has its own controllers and serves the discovery log.
//
// Bad input gets the NVMe status Linux nvmet gives it (Invalid Opcode,
// Invalid Field, SGL Data Block Invalid, LBA Out of Range, Connect Invalid
// Parameters or Host ...), with DNR; a capsule shorter than 64 bytes, a
// capsule larger than the receive buffer, or a host that sends more
// commands than its queue holds ends that queue (a Terminate from the
// RNIC, or a reset). No input makes a queue wait forever: a host that
// vanishes flushes the queue's work requests and its goroutine ends.
// Other queues and controllers carry on.
//
// # Host
//
// Host (host.go) connects an admin queue and I/O queues, enables the
// controller, identifies it and its namespaces, and reads and writes with
// keyed SGLs over memory it registers for each command.
package nvmeof
