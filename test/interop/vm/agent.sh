#!/bin/sh
# agent.sh - the guest side of gosiw's interop suite (run as the guest's
# /mnt/host/cmd.sh by run.sh). It captures all TCP traffic on eth0 and runs
# the step scripts the host drops into /mnt/host/q/: for each new N.sh it
# runs `sh N.sh > N.out 2>&1` in the background and then writes the exit
# status to N.rc. A step that starts a server touches N.ready itself once
# it listens. /mnt/host/q/STOP ends the session (or 900 s pass).
# The capture's kernel buffer is 16 MiB (-B): under TCG on a busy host
# tcpdump can fall behind, and what it drops is a gap in the capture;
# tcpdump's count of drops goes out beside it (tcpdump.err) for the host
# to report.
Q=/mnt/host/q; P=/mnt/host/pcaps
mkdir -p $Q $P
rdma link delete siw_lo 2>/dev/null   # one iWARP device: wildcard listens are unambiguous
tcpdump -i eth0 -s 0 -B 16384 -U -Z root -w /tmp/interop.pcap tcp 2>/tmp/tcpdump.err &
TPID=$!
sleep 1
echo "agent: $(uname -r), $(rdma link show | tr '\n' ' ')" > $Q/READY
n=1; t0=$(cut -d. -f1 /proc/uptime)
while [ ! -f $Q/STOP ] && [ $(( $(cut -d. -f1 /proc/uptime) - t0 )) -lt 900 ]; do
    if [ -f $Q/$n.sh ]; then
        ( sh $Q/$n.sh > $Q/$n.out 2>&1; echo $? > $Q/$n.rc.tmp; mv $Q/$n.rc.tmp $Q/$n.rc ) &
        n=$((n+1))
        continue
    fi
    sleep 0.2
done
sleep 1
kill -INT $TPID; wait $TPID
cp /tmp/interop.pcap $P/interop.pcap
cp /tmp/tcpdump.err $P/tcpdump.err
dmesg > $Q/dmesg.txt
