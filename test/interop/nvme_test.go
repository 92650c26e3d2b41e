//go:build interop

package interop

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/daemon"
	"github.com/gosiw/gosiw/internal/nvmeof"
	"github.com/gosiw/gosiw/internal/testutil"
	"github.com/gosiw/gosiw/mpa"
	"github.com/gosiw/gosiw/rdmap"
)

// NVMe over Fabrics against the Linux kernel: its host (nvme-rdma) and
// nvme-cli against siwd's target, and gosiw's Go host against the kernel
// target (nvmet-rdma), once with siw's defaults and once with CRC required
// by the guest's siw.

const (
	guestHostNQN = "nqn.2026-01.dev.gosiw:guest"
	guestHostID  = "7a1b6b8e-2d3c-4f5e-8a9b-0c1d2e3f4a5b"
	privateNQN   = "nqn.2026-01.dev.gosiw:private"
	guestTgtNQN  = "nqn.2026-01.dev.gosiw:linux-target"
	diskMiB      = 80
)

func TestInteropNVMe(t *testing.T) {
	cache := interopCache()
	var tb table
	defer tb.print()
	t.Run("siw-defaults", func(t *testing.T) { nvmeSession(t, &tb, cache, false) })
	t.Run("crc-required", func(t *testing.T) { nvmeSession(t, &tb, cache, true) })
}

// siwdNVMe runs siwd with an NVMe listener on 127.0.0.1:nvmePort (the
// guest reaches it as 10.0.2.2) and returns its log and a function that
// stops it.
func siwdNVMe(t *testing.T, nvmePort int) (*testutil.SyncBuffer, func()) {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "siwd.toml")
	toml := fmt.Sprintf(`[[region]]
name = "disk"
size = "%dM"
[[region]]
name = "secret"
size = "1M"
[[nvme.subsystem]]
nqn = %q
namespaces = ["secret"]
allowed_hosts = ["nqn.2026-01.dev.gosiw:someone-else"]
`, diskMiB, privateNQN)
	if err := os.WriteFile(conf, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "siwd"), "--config", conf, "--listen", fmt.Sprintf("127.0.0.1:%d", hostPort(t)), "--metrics", "",
		"--log-level", "debug", "--nvme-listen", fmt.Sprintf("127.0.0.1:%d", nvmePort), "--nvme-namespace", "disk")
	out, _ := cmd.StdoutPipe()
	logb := &testutil.SyncBuffer{}
	cmd.Stderr = logb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "siwd listening") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("siwd did not start: %s", logb.String())
	}
	go func() {
		for sc.Scan() {
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
		})
	}
	t.Cleanup(stop)
	return logb, stop
}

// noTimeWait is the guest command that keeps the guest's TCP from
// holding closed connections in TIME_WAIT. The guest's siw connects from
// the port rdma_cm picked at random, which rdma_cm knows free of RDMA
// IDs, not of the TCP connections that closed before it; the guest
// closes first (its nvme-rdma disconnects), and a TIME_WAIT left toward
// siwd's NVMe port by the case's earlier connections there (a
// discovery, a controller's admin and I/O queues: after linuxHostScript
// the guest held three) makes connect() fail with EADDRNOTAVAIL when
// rdma_cm picks its port: "nvme connect" once failed with "Cannot assign
// requested address" right after a discovery that worked. tcp_tw_reuse
// would not help: qemu's slirp sends no TCP timestamps.
const noTimeWait = `echo 0 > /proc/sys/net/ipv4/tcp_max_tw_buckets`

// linuxHostScript connects the kernel host through /dev/nvme-fabrics with
// 2 I/O queues, checks the namespace size, writes 64 MiB of random data
// with O_DIRECT at 4 KiB, 64 KiB, 256 KiB and 1 MiB blocks (16 MiB each),
// reads each back and compares, then deletes the controller.
const linuxHostScript = `set -e
P=%d; NQN=%s; HN=%s; HI=%s; CAP=%d
` + noTimeWait + `
# No capture of the whole session: hundreds of MiB of data would fill the
# guest's RAM and take minutes to copy out. With CAP=1 (CRC required) what
# siwd sends, and only that, is captured, so that the host can check every
# FPDU's CRC and match siw's CRC errors to the FPDUs they were about.
kill $(pidof tcpdump) 2>/dev/null || true
sleep 0.5; rm -f /tmp/interop.pcap
if [ $CAP = 1 ]; then tcpdump -i eth0 -s 0 -U -w /tmp/crc.pcap "tcp src port $P" 2>/tmp/crc.err & TP=$!; sleep 1; fi
dmesg -c >/dev/null
exec 3<>/dev/nvme-fabrics
echo "transport=rdma,traddr=10.0.2.2,trsvcid=$P,nqn=$NQN,nr_io_queues=2,hostnqn=$HN,hostid=$HI" >&3
read -r R <&3
exec 3>&-
echo "fabrics: $R"
I=$(echo "$R" | sed 's/.*instance=\([0-9]*\).*/\1/'); C=nvme$I
for i in $(seq 100); do [ -b /dev/${C}n1 ] && break; sleep 0.1; done
D=/dev/${C}n1
echo "sectors: $(cat /sys/block/${C}n1/size)"
dmesg | grep -o 'creating [0-9]* I/O queues' | tail -1
dd if=/dev/urandom of=/tmp/rand bs=1M count=64 2>/dev/null
off=0
for bs in 4096 65536 262144 1048576; do
  n=$((16*1048576/bs)); s=$((off/bs))
  t0=$(cut -d' ' -f1 /proc/uptime)
  dd if=/tmp/rand of=$D bs=$bs count=$n skip=$s seek=$s oflag=direct 2>/dev/null
  t1=$(cut -d' ' -f1 /proc/uptime)
  dd if=$D of=/tmp/back bs=$bs count=$n skip=$s iflag=direct 2>/dev/null
  t2=$(cut -d' ' -f1 /proc/uptime)
  dd if=/tmp/rand of=/tmp/want bs=$bs count=$n skip=$s 2>/dev/null
  cmp /tmp/want /tmp/back
  echo "bs $bs: 16 MiB equal (write $t0-$t1 s, read $t1-$t2 s)"
  off=$((off+16*1048576))
done
rm -f /tmp/back /tmp/want
md5sum /tmp/rand | cut -d' ' -f1 > /tmp/rand.md5
echo "recoveries: $(dmesg | grep -c 'starting error recovery') siw crc errors: $(dmesg | grep -c 'siw: crc error')"
dmesg | grep 'siw: crc error' || true
dmesg | grep 'error recovery' | head -3
echo 1 > /sys/class/nvme/$C/delete_controller
for i in $(seq 50); do [ -e /sys/class/nvme/$C ] || break; sleep 0.1; done
[ -e /sys/class/nvme/$C ] && { echo "controller $C still there"; exit 1; }
echo "deleted $C"
if [ $CAP = 1 ]; then kill -INT $TP; wait $TP || true; cp /tmp/crc.pcap /mnt/host/q/crc.pcap; rm -f /tmp/crc.pcap; echo "captured"; fi
`

// nvmeCLIScript discovers siwd's subsystems with nvme-cli, connects to the
// default one through what the discovery log lists, reads the data the
// first script wrote back (the controller was deleted in between: siwd
// kept serving), disconnects, and is refused by the private subsystem.
const nvmeCLIScript = `set -e
P=%d; NQN=%s; HN=%s; HI=%s; PNQN=%s
` + noTimeWait + `
nvme discover -t rdma -a 10.0.2.2 -s $P --hostnqn=$HN --hostid=$HI > /tmp/disc
cat /tmp/disc
grep -q "subnqn: *$NQN" /tmp/disc
grep -q "subnqn: *$PNQN" /tmp/disc && { echo "the private subsystem is listed to a host it refuses"; exit 1; }
L=$(grep -m1 "subnqn: *nqn.2026-01.dev.gosiw:siwd" /tmp/disc | sed 's/.*subnqn: *//')
if ! nvme connect -t rdma -a 10.0.2.2 -s $P -n "$L" --hostnqn=$HN --hostid=$HI -i 2; then
  echo "nvme connect failed; the guest kernel said:"; dmesg | grep -i -E 'nvme|siw|rdma|iw_cm' | tail -15; exit 1
fi
for i in $(seq 100); do C=$(grep -l "$L" /sys/class/nvme/*/subsysnqn 2>/dev/null | head -1 | cut -d/ -f5); [ -n "$C" ] && [ -b /dev/${C}n1 ] && break; sleep 0.1; done
echo "connected $C"
dd if=/dev/${C}n1 of=/tmp/back bs=1M count=64 iflag=direct 2>/dev/null
[ "$(md5sum /tmp/back | cut -d' ' -f1)" = "$(cat /tmp/rand.md5)" ] || { echo "data differs after reconnecting"; exit 1; }
echo "64 MiB read back after reconnect: equal"
nvme disconnect -n "$L"
if nvme connect -t rdma -a 10.0.2.2 -s $P -n $PNQN --hostnqn=$HN --hostid=$HI 2>&1; then echo "UNEXPECTED: connected to $PNQN"; exit 1; fi
echo "refused by $PNQN"
`

// nvmetScript makes the guest a kernel NVMe-oF target: a 32 MiB file
// namespace on tmpfs, port 4420 on the siw device, any host; it waits for
// the host side to finish, then prints the md5 of the file's first MiB.
const nvmetScript = `set -e
NQN=%s
mount -t configfs none /sys/kernel/config 2>/dev/null || true
cd /sys/kernel/config/nvmet
dd if=/dev/zero of=/tmp/nvmet.img bs=1M count=32 2>/dev/null
mkdir subsystems/$NQN
echo 1 > subsystems/$NQN/attr_allow_any_host
mkdir subsystems/$NQN/namespaces/1
echo /tmp/nvmet.img > subsystems/$NQN/namespaces/1/device_path
echo 1 > subsystems/$NQN/namespaces/1/buffered_io
echo 1 > subsystems/$NQN/namespaces/1/enable
mkdir ports/1
echo rdma > ports/1/addr_trtype; echo ipv4 > ports/1/addr_adrfam
echo 10.0.2.15 > ports/1/addr_traddr; echo 4420 > ports/1/addr_trsvcid
ln -s /sys/kernel/config/nvmet/subsystems/$NQN ports/1/subsystems/$NQN
touch {{READY}}
for i in $(seq 1200); do [ -f /mnt/host/q/nvmet.done ] && break; sleep 0.1; done
sync
echo "md5 $(dd if=/tmp/nvmet.img bs=1M count=1 2>/dev/null | md5sum | cut -d' ' -f1)"
rm ports/1/subsystems/$NQN; rmdir ports/1
echo 0 > subsystems/$NQN/namespaces/1/enable; rmdir subsystems/$NQN/namespaces/1; rmdir subsystems/$NQN
`

func nvmeSession(t *testing.T, tb *table, cache string, crc bool) {
	var kappend []string
	tag := ""
	if crc {
		kappend = []string{"siw.mpa_crc_required=1"}
		tag = " [guest siw: CRC required]"
	}
	g := bootGuest(t, cache, kappend...)
	defer func() {
		if g != nil {
			g.stop(t)
		}
	}()
	nvmePort := hostPort(t)
	logb, stopSiwd := siwdNVMe(t, nvmePort)
	defer stopSiwd()

	// 1. The kernel host -> siwd: 64 MiB at four block sizes, 2 I/O queues.
	capture := 0
	if crc {
		capture = 1
	}
	st := g.run(fmt.Sprintf(linuxHostScript, nvmePort, daemon.DefaultNQN, guestHostNQN, guestHostID, capture))
	out, rc, err := st.wait(600 * time.Second)
	if err == nil && rc != 0 {
		err = fmt.Errorf("guest script rc %d:\n%s", rc, out)
	}
	detail := summarize(out)
	if err == nil {
		err = checkLinuxHost(out)
	}
	if err == nil && crc {
		var note string
		note, err = checkSiwCRCErrors(out, filepath.Join(g.q, "crc.pcap"), uint16(nvmePort))
		t.Logf("CRC check: %s", note)
		detail = note + "; " + detail
	} else if err == nil && !strings.Contains(out, "recoveries: 0 siw crc errors: 0") {
		// Equal data after the kernel host's error recovery is not a pass:
		// the connection must have carried everything without a reset.
		err = fmt.Errorf("the kernel host recovered from errors (data equal only thanks to its retries):\n%s", out)
	}
	if err == nil && crc && !strings.Contains(logb.String(), `"crc": true`) {
		err = fmt.Errorf("siwd's NVMe queues did not use CRC:\n%s", tail(logb.String(), 2000))
	}
	tb.add(t, "Linux nvme-rdma host -> siwd: 2 I/O queues, 64 MiB O_DIRECT at 4K/64K/256K/1M, equal; delete_controller"+tag, err, detail)

	// 2. nvme-cli: discover, connect through the log, read back, refused host.
	if err == nil {
		st = g.run(fmt.Sprintf(nvmeCLIScript, nvmePort, daemon.DefaultNQN, guestHostNQN, guestHostID, privateNQN))
		out, rc, err = st.wait(300 * time.Second)
		if err == nil && rc != 0 {
			err = fmt.Errorf("guest script rc %d:\n%s\nsiwd's log ends:\n%s", rc, out, tail(logb.String(), 1500))
		}
		if err == nil && !strings.Contains(logb.String(), "nvme host refused") {
			err = fmt.Errorf("siwd did not log the refused host:\n%s", tail(logb.String(), 2000))
		}
		tb.add(t, "nvme discover + nvme connect -> siwd, data kept across controllers; host outside allowed_hosts refused"+tag, err,
			firstLine(out, "read back")+"; "+firstLine(out, "refused"))
	}

	// 3. The Go host -> the kernel target nvmet-rdma.
	st = g.run(fmt.Sprintf(nvmetScript, guestTgtNQN))
	err = st.ready(60 * time.Second)
	detail = ""
	var sum string
	if err == nil {
		detail, sum, err = goHostToNvmet(crc)
	}
	os.WriteFile(filepath.Join(g.q, "nvmet.done"), nil, 0o644)
	gout, grc, werr := st.wait(120 * time.Second)
	if err == nil && (werr != nil || grc != 0) {
		err = fmt.Errorf("guest nvmet rc %d (%v):\n%s", grc, werr, gout)
	}
	if err == nil && !strings.Contains(gout, "md5 "+sum) {
		err = fmt.Errorf("the target's file does not hold what the Go host wrote (md5 %s):\n%s", sum, gout)
	}
	tb.add(t, "Go NVMe-oF host -> Linux nvmet-rdma: identify, 1 MiB written and read back, in the target's file"+tag, err, detail)

	g.stop(t)
	g = nil
}

var sizeRE = regexp.MustCompile(`sectors: (\d+)`)

func checkLinuxHost(out string) error {
	m := sizeRE.FindStringSubmatch(out)
	if m == nil || m[1] != fmt.Sprint(diskMiB<<20/512) {
		return fmt.Errorf("namespace size: want %d sectors:\n%s", diskMiB<<20/512, out)
	}
	if !strings.Contains(out, "creating 2 I/O queues") {
		return fmt.Errorf("want 2 I/O queues:\n%s", out)
	}
	if strings.Count(out, "MiB equal") != 4 || !strings.Contains(out, "deleted nvme") {
		return fmt.Errorf("data check:\n%s", out)
	}
	return nil
}

var recoveriesRE = regexp.MustCompile(`recoveries: (\d+) siw crc errors: (\d+)`)

// checkSiwCRCErrors judges a CRC-required session of the kernel host. Linux
// siw misreads the CRC of an FPDU whose trailer reaches it in two skbs (see
// crcsplit_test.go and the README): it then reports a CRC error, the host
// recovers and retries. The session passes only if every FPDU siwd sent
// (the capture at pcap, source port port) has a good CRC, every CRC error
// siw logged is one of those misreadings (the value siw read is what its
// trailer reassembly makes of a split trailer in the capture, and its own
// value is the CRC on the wire), and every recovery followed such an error.
func checkSiwCRCErrors(out, pcap string, port uint16) (string, error) {
	m := recoveriesRE.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("no error counts:\n%s", out)
	}
	recoveries, _ := strconv.Atoi(m[1])
	errs := siwCRCErrors(out)
	if len(errs) != atoi(m[2]) {
		return "", fmt.Errorf("%s siw CRC errors counted, %d printed:\n%s", m[2], len(errs), out)
	}
	sc, err := scanResponderStream(pcap, port)
	if err != nil {
		return "", fmt.Errorf("the capture of what siwd sent: %w", err)
	}
	if sc.FPDUs == 0 || sc.BadCRC != 0 {
		return "", fmt.Errorf("capture of what siwd sent: %d FPDUs, %d with a bad CRC", sc.FPDUs, sc.BadCRC)
	}
	matched, unexplained := explainCRCErrors(errs, sc)
	note := fmt.Sprintf("%d FPDUs from siwd, all CRCs good, %d trailers split between segments; siw CRC errors %d, each a split trailer misread by siw (%s); recoveries %d",
		sc.FPDUs, len(sc.Splits), len(errs), strings.Join(matched, "; "), recoveries)
	if len(unexplained) != 0 {
		return note, fmt.Errorf("siw CRC errors that no split trailer explains (in, own): %x\n%s", unexplained, out)
	}
	if recoveries > len(errs) {
		return note, fmt.Errorf("%d recoveries, only %d after a siw CRC error:\n%s", recoveries, len(errs), out)
	}
	return note, nil
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func summarize(out string) string {
	var parts []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "bs ") || strings.HasPrefix(l, "creating") || strings.HasPrefix(l, "sectors") {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// goHostToNvmet connects the Go host to the guest's nvmet-rdma, checks
// Identify, writes 1 MiB of random data over two queues (keyed SGLs and
// in-capsule data) and reads it back.
func goHostToNvmet(crc bool) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	dev, _ := rdmap.NewDevice(nil)
	defer dev.Close()
	var h *nvmeof.Host
	var err error
	// Linux siw 6.1 as the responder applies mpa_crc_required only to a
	// Request that asks for CRC (siw_proc_mpareq): when the guest requires
	// CRC, the Go host asks for it.
	pol := mpa.Policy{MaxPrivateData: mpa.SiwMaxPrivateData}
	if crc {
		pol.CRC = mpa.CRCOn
	}
	for try := 0; try < 5; try++ {
		h, err = nvmeof.Dial(ctx, fwdAddr(fwdNVMe), dev,
			&nvmeof.HostConfig{SubNQN: guestTgtNQN, IOQueues: 2, KATO: 10 * time.Second, InCapsule: true, CM: &cm.Config{MPA: pol}})
		if err == nil || !strings.Contains(err.Error(), "reset") {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return "", "", fmt.Errorf("dial: %w", err)
	}
	defer h.Close()
	ci := h.Ctrl
	if ci.SubNQN != guestTgtNQN || ci.CtrlType != nvmeof.CtrlTypeIO || !strings.HasPrefix(ci.Model, "Linux") {
		return "", "", fmt.Errorf("identify controller %+v", ci)
	}
	if crc != h.CRC() {
		return "", "", fmt.Errorf("CRC %v on the connection, want %v", h.CRC(), crc)
	}
	ni, err := h.IdentifyNamespace(ctx, 1)
	if err != nil || ni.Size<<ni.LBAShift != 32<<20 {
		return "", "", fmt.Errorf("identify namespace %+v: %v", ni, err)
	}
	data := make([]byte, 1<<20)
	rand.Read(data)
	chunk := 128 << 10
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < len(data); i += chunk {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.Write(ctx, (i/chunk)%2, 1, ni.LBAShift, uint64(i)>>ni.LBAShift, data[i:i+chunk]); err != nil {
				errs <- fmt.Errorf("write at %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	// Small writes go in the capsule (nvmet's 4 KiB of in-capsule data).
	if err := h.Write(ctx, 0, 1, ni.LBAShift, 0, data[:4096]); err != nil {
		errs <- fmt.Errorf("in-capsule write: %w", err)
	}
	back := make([]byte, len(data))
	for i := 0; i < len(data); i += chunk {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.Read(ctx, (i/chunk+1)%2, 1, ni.LBAShift, uint64(i)>>ni.LBAShift, back[i:i+chunk]); err != nil {
				errs <- fmt.Errorf("read at %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return "", "", err
	}
	if !bytes.Equal(back, data) {
		return "", "", fmt.Errorf("read back differs")
	}
	var c nvmeof.Command
	c.SetHeader(nvmeof.IOFlush, 0, 1)
	if _, err := h.IOCmd(ctx, 0, &c, nil, false); err != nil {
		return "", "", fmt.Errorf("flush: %w", err)
	}
	return fmt.Sprintf("model %q fw %q cntlid %d, ioccsz %d, %d I/O queues, ns %d blocks of %d B, crc %v; 1 MiB equal",
		ci.Model, ci.Firmware, ci.CntlID, ci.IOCCSZ, h.IOQueues(), ni.Size, 1<<ni.LBAShift, h.CRC()), fmt.Sprintf("%x", md5.Sum(data)), nil
}
