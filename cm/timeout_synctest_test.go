package cm

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"

	"github.com/gosiw/gosiw/rdmap"
)

// The responder's RequestTimeout in fake time (testing/synctest over
// net.Pipe): the handshake ends exactly RequestTimeout after it started,
// however the peer paces its bytes, and nothing reaches the ULP. The
// hostile table (hostile_test.go) runs the same peers over real TCP
// through a listener without asserting when.
func TestRequestTimeoutFakeClock(t *testing.T) {
	req, err := os.ReadFile(filepath.Join("testdata", "siw-mpa-request.bin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		// peer writes to its end of the pipe until the write fails.
		peer func(c net.Conn)
	}{
		{"silence", func(net.Conn) {}},
		{"truncated then silence", func(c net.Conn) { _, _ = c.Write(req[:21]) }},
		// One byte every 700 ms, all but the last: the trickle goes on
		// past the deadline, so only a total deadline (not one per read)
		// ends it.
		{"slow loris", func(c net.Conn) {
			for _, b := range req[:len(req)-1] {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(700 * time.Millisecond)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dev, err := rdmap.NewDevice(nil)
				if err != nil {
					t.Fatal(err)
				}
				defer dev.Close()
				var reasons []string
				cfg, err := (&Config{OnRefused: func(_ net.Addr, r string) { reasons = append(reasons, r) }}).resolve()
				if err != nil {
					t.Fatal(err)
				}
				events := 0
				id := NewID(dev, func(*ID, *Event) error { events++; return nil })
				defer id.Destroy()
				local, peer := net.Pipe()
				defer peer.Close()
				start := time.Now()
				served := make(chan struct{})
				go func() {
					id.serveConn(context.Background(), local, &cfg, zap.NewNop(), cfg.RequestTimeout, func() {})
					close(served)
				}()
				closed := make(chan time.Duration, 1)
				go func() {
					_, err := io.Copy(io.Discard, peer)
					if err != nil && !errors.Is(err, io.ErrClosedPipe) {
						t.Errorf("peer read: %v", err)
					}
					closed <- time.Since(start)
				}()
				c.peer(peer)
				if got := <-closed; got != DefaultRequestTimeout {
					t.Errorf("closed after %v, want exactly %v", got, DefaultRequestTimeout)
				}
				<-served
				synctest.Wait()
				if len(reasons) != 1 || reasons[0] != "timeout" {
					t.Errorf("OnRefused reasons %q, want [timeout]", reasons)
				}
				if events != 0 {
					t.Errorf("%d events reached the handler", events)
				}
			})
		})
	}
}
