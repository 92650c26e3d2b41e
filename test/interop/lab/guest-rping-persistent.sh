#!/bin/sh
# Guest script: one persistent rping server (rping -s -P) on :7174 until the
# host creates /mnt/host/STOP; then the kernel log.
R=/mnt/host/results; mkdir -p $R
OUT=$R/cm-rping-persistent.txt
rm -f /mnt/host/STOP /mnt/host/READY
rdma link delete siw_lo
# waitlisten: until a kernel TCP socket listens on port 7174 (0x1C06)
waitlisten() { for _ in $(seq 1 100); do grep -q ':1C06 00000000:0000 0A' /proc/net/tcp && return; sleep 0.2; done; }
rping -s -P -a 0.0.0.0 -p 7174 > $OUT 2>&1 &
rp=$!
waitlisten; echo "persistent" > /mnt/host/READY
t0=$(cut -d. -f1 /proc/uptime)
while [ ! -f /mnt/host/STOP ] && [ $(( $(cut -d. -f1 /proc/uptime) - t0 )) -lt 120 ]; do sleep 1; done
kill $rp 2>/dev/null
echo "## dmesg" >> $OUT; dmesg | grep -iE 'siw|iw_cm|BUG|RIP' | tail -n 30 >> $OUT
cat $OUT
