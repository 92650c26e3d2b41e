#!/bin/sh
# Guest script (linux-siw-vm run.sh): Linux rping as MPA responder for gosiw on
# the host (hostfwd 127.0.0.1:17174 -> :7174). Three one-shot rping servers
# (for three gosiw Connects), then a persistent one (rping -P) for siw probe,
# until the host creates /mnt/host/STOP. /mnt/host/READY says which is up.
P=/mnt/host/pcaps; R=/mnt/host/results; mkdir -p $P $R
OUT=$R/cm-rping-servers.txt
rm -f /mnt/host/STOP /mnt/host/READY
rdma link delete siw_lo
# waitlisten: until a kernel TCP socket listens on port 7174 (0x1C06)
waitlisten() { for _ in $(seq 1 100); do grep -q ':1C06 00000000:0000 0A' /proc/net/tcp && return; sleep 0.2; done; }   # one iWARP device, so the wildcard listen is unambiguous
tcpdump -i eth0 -s 0 -U -Z root -w /tmp/cms.pcap "tcp port 7174" 2>/tmp/cms.err &
tpid=$!
sleep 1.5
: > $OUT
for i in 1 2 3; do
  echo "## rping -s -a 0.0.0.0 -p 7174 -v -C 1   (server $i)" >> $OUT
  timeout 40 rping -s -a 0.0.0.0 -p 7174 -v -C 1 >> $OUT 2>&1 &
  rp=$!
  waitlisten; echo "server$i" > /mnt/host/READY
  wait $rp; echo "## rc=$?" >> $OUT
done
echo "## rping -s -P -a 0.0.0.0 -p 7174   (persistent, for siw probe)" >> $OUT
rping -s -P -a 0.0.0.0 -p 7174 >> $OUT 2>&1 &
rp=$!
waitlisten; echo "persistent" > /mnt/host/READY
t0=$(cut -d. -f1 /proc/uptime)
while [ ! -f /mnt/host/STOP ] && [ $(( $(cut -d. -f1 /proc/uptime) - t0 )) -lt 240 ]; do sleep 1; done
kill $rp 2>/dev/null; wait $rp
kill -INT $tpid; wait $tpid
cp /tmp/cms.pcap $P/cm-rping-servers.pcap
echo "## dmesg" >> $OUT; dmesg | grep -iE 'siw|iw_cm|kernel BUG|RIP:' | tail -n 40 >> $OUT
cat $OUT
