#!/bin/sh
# Guest script (linux-siw-vm run.sh): Linux rping as MPA initiator toward a gosiw
# listener on the host (10.0.2.2:7174 = the host's 127.0.0.1:7174). Two
# clients: gosiw accepts the first and rejects the second.
P=/mnt/host/pcaps; R=/mnt/host/results; mkdir -p $P $R
OUT=$R/cm-rping-clients.txt
tcpdump -i eth0 -s 0 -U -Z root -w /tmp/cmc.pcap "tcp port 7174" 2>/tmp/cmc.err &
tpid=$!
sleep 1.5
: > $OUT
for i in 1 2; do
  echo "## rping -c -a 10.0.2.2 -p 7174 -v -C 1   (client $i)" >> $OUT
  timeout 40 rping -c -a 10.0.2.2 -p 7174 -v -C 1 >> $OUT 2>&1
  echo "## rc=$?" >> $OUT
  sleep 1
done
sleep 1
kill -INT $tpid; wait $tpid
cp /tmp/cmc.pcap $P/cm-rping-clients.pcap
echo "## dmesg" >> $OUT; dmesg | grep -i siw | tail -n 20 >> $OUT
cat $OUT
