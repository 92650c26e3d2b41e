package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gosiw/gosiw/internal/proto"
)

// mapPerms returns the permissions ("r--s", "rw-s", ...) of the mapping
// that holds b, from /proc/self/maps.
func mapPerms(t *testing.T, b []byte) string {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	addr := uint64(uintptr(unsafe.Pointer(&b[0])))
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var lo, hi uint64
		var perms string
		if _, err := fmt.Sscanf(sc.Text(), "%x-%x %s", &lo, &hi, &perms); err == nil && lo <= addr && addr < hi {
			return perms
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return ""
}

// TestReadOnlyFileRegion: a read-only file-backed region never changes its
// file. A file shorter than the region is refused with a clear error and
// left as it was; a missing one is refused rather than created; one long
// enough is mapped readable only and shows the file's bytes.
func TestReadOnlyFileRegion(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.img")
	data := bytes.Repeat([]byte("gosiw-ro"), 512) // 4 KiB
	if err := os.WriteFile(small, data, 0o400); err != nil {
		t.Fatal(err)
	}
	st0, _ := os.Stat(small)

	_, err := New(&Config{Listen: "127.0.0.1:0", Regions: []Region{{Name: "a", Size: 8 << 10, File: small, Access: proto.AccessRead}}}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "holds 4096 bytes, fewer than the region's 8192") {
		t.Fatalf("8 KiB read-only region over a 4 KiB file: %v, want a refusal naming both sizes", err)
	}
	if st, _ := os.Stat(small); st.Size() != 4096 || !st.ModTime().Equal(st0.ModTime()) || st.Mode() != st0.Mode() {
		t.Fatalf("the refused file changed: size %d mode %v", st.Size(), st.Mode())
	}
	missing := filepath.Join(dir, "missing.img")
	if _, err := New(&Config{Regions: []Region{{Name: "m", Size: 4096, File: missing, Access: proto.AccessRead}}}, nil, nil); err == nil {
		t.Fatal("a read-only region over a missing file was accepted")
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("a read-only region created its file: %v", err)
	}

	// The file is 0400: only a read-only open can map it.
	s, err := New(&Config{Listen: "127.0.0.1:0", ShutdownTimeout: time.Second,
		Regions: []Region{{Name: "a", Size: 4096, File: small, Access: proto.AccessRead},
			{Name: "w", Size: 8192, File: filepath.Join(dir, "w.img"), Access: proto.AccessRead | proto.AccessWrite}}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.dev.Close()
		s.closeRegions()
	}()
	if r := s.regions["a"]; !bytes.Equal(r.mem, data) {
		t.Error("the read-only region does not show the file's bytes")
	} else if p := mapPerms(t, r.mem); p != "r--s" {
		t.Errorf("read-only region mapped %s, want r--s", p)
	}
	if p := mapPerms(t, s.regions["w"].mem); p != "rw-s" {
		t.Errorf("writable region mapped %s, want rw-s", p)
	}
	if st, _ := os.Stat(filepath.Join(dir, "w.img")); st == nil || st.Size() != 8192 {
		t.Errorf("a writable region's file is created at the region's size: %v", st)
	}
}
