// Package perf measures gosiw: a client (Run, `siw perf write|read|send`)
// and a responder (Service in siwd, Serve in `siw perf -s`) that move data
// over one gosiw connection per stream, report iperf3-style intervals and a
// summary, and check at the end that the data really arrived. RunTCP and
// ServeTCP run the same test over plain TCP, as a baseline.
//
// # Setup, in MPA private data (at most 251 bytes either way)
//
//	client                                          responder
//	MPA Request "gosiw-perf/1 op=write size=65536 depth=16"  ->
//	    (op: write, read, send or pingpong; IRD 1, ORD depth for read)
//	                                     <- MPA Reply "gosiw-perf/1
//	                                        stag=0x00000100 len=65536 recvs=32"
//	    or a reject whose private data is "gosiw-perf/1 error: <reason>"
//
// The Reply names the responder's buffer (STag, length; zero-based
// offsets) and how many receives it keeps posted.
//
// # The test, by op
//
//	write     the client keeps depth RDMA Writes of size bytes in flight, all
//	          to offset 0 of the responder's buffer, from a source holding
//	          the test pattern; the responder does nothing until "fin".
//	          Writes and Sends are posted in lists (PostSends) of a quarter
//	          of the depth, only the last of each signaled (as perftest's CQ
//	          moderation); a request counts as in flight until a signaled
//	          completion at or after it has been reaped.
//	read      the client keeps depth RDMA Reads of size bytes in flight from
//	          the responder's buffer, which holds the test pattern.
//	send      the client keeps up to depth Sends in flight; each carries its
//	          sequence number (8 bytes, big-endian) then the pattern. The
//	          responder checks each receive, reposts those of one poll as
//	          one list (PostRecvs), and returns credits
//	          (below): iWARP has no receiver-not-ready retry, so a Send
//	          without a posted receive would end the connection.
//	pingpong  one Send at a time; the responder sends it back from the same
//	          buffer; the client checks it and times the round trip.
//
// # Control messages: Sends with the Solicited Event bit (data never has it)
//
//	responder -> client  "credit N"  N more Sends may go. The client starts
//	                     with recvs-1 credits (one receive stays free for
//	                     "fin"); the responder returns them in batches of
//	                     ceil(recvs/2), so at most one is ever unread. A
//	                     credit past what the client owes (its Sends not
//	                     yet credited) ends the test with an error.
//	client -> responder  "fin ops=N bytes=B"  after the last work request
//	                     has completed: the client's counts.
//	responder -> client  "ok [ops=N] [bytes=B]"  what the responder counted:
//	                     messages and bytes received (send, pingpong), bytes
//	                     placed by Writes (write; from the QP's placement
//	                     counters, less the control messages); nothing for
//	                     read. Or "error TEXT" when it found the data wrong
//	                     (sequence, length, pattern).
//
// The client fails the stream when the counts differ; for read it checks
// its own placement counters and the pattern in its sink. Then it
// disconnects (gracefully), which ends the responder's service.
//
// # Concurrency
//
// A client stream and a served connection each run on one goroutine that
// posts work and polls its CQ (the QP engines run their own). The client's
// reporter goroutine reads the streams' atomic counters once per interval.
package perf
