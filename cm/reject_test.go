package cm_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gosiw/gosiw/cm"
	"github.com/gosiw/gosiw/internal/testutil"
)

// TestRejectContractStress is iw_cm_reject(9)'s promise under load: many
// concurrent requests, rejected from inside the handler, from other
// goroutines, and raced against Accept and Destroy; no event may reach an
// ID after its Reject returned nil, and each initiator sees the outcome
// that won (with the rejecting private data).
func TestRejectContractStress(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 60
	}
	dev := newDev(t)
	var clock eventClock  // its end: Reject returned nil
	var accepted sync.Map // *cm.ID -> true once Accept returned nil
	// outside never fills (one ID per request at most); outsideMu orders
	// the handler's sends before its close: the race detector does not
	// see that every send came before the reply the test waited for
	// (that order runs through the connection).
	outside := make(chan *cm.ID, n)
	var outsideMu sync.Mutex
	outsideClosed := false
	var k atomic.Int64
	var outsideWG sync.WaitGroup

	handler := func(id *cm.ID, ev *cm.Event) error {
		clock.arrive(id, ev)
		if ev.Type != cm.EventConnectRequest {
			return nil
		}
		switch k.Add(1) % 3 {
		case 0: // inside the handler
			pd := []byte(fmt.Sprintf("in:%s", ev.PrivateData))
			if err := id.Reject(pd); err != nil {
				t.Errorf("reject inside: %v", err)
				return nil
			}
			clock.end(id)
		default: // outside
			outsideMu.Lock()
			defer outsideMu.Unlock()
			if outsideClosed {
				// A request the test no longer waits for (its client
				// gave up): destroyed when the handler returns.
				return errors.New("test over")
			}
			outside <- id
		}
		return nil
	}
	l := listenID(t, dev, cfgT(t, cm.Config{}), n, handler)

	// The outside rejecters: half reject alone, half race Accept, Reject
	// and Destroy.
	for w := 0; w < 4; w++ {
		outsideWG.Add(1)
		go func() {
			defer outsideWG.Done()
			for id := range outside {
				reject := func() {
					err := id.Reject([]byte("out"))
					if err == nil {
						clock.end(id)
					} else if !errors.Is(err, cm.ErrInvalidState) {
						t.Errorf("reject outside: %v", err)
					}
				}
				if k.Add(1)%2 == 0 {
					reject()
					id.Destroy()
					continue
				}
				// Accept, Reject and Destroy, released together.
				start := make(chan struct{})
				var wg sync.WaitGroup
				wg.Add(3)
				go func() {
					defer wg.Done()
					<-start
					if err := id.Accept(cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 1, ORD: 1}); err == nil {
						accepted.Store(id, true)
					}
				}()
				go func() {
					defer wg.Done()
					<-start
					reject()
				}()
				go func() {
					defer wg.Done()
					<-start
					id.Destroy()
				}()
				close(start)
				wg.Wait()
				id.Destroy()
			}
		}()
	}

	cli := newRecorder(t)
	var clients []*cm.ID
	for i := range n {
		id := cm.NewID(dev, cli.handle)
		clients = append(clients, id)
		if err := id.Connect(l.LocalAddr().String(), cm.ConnParam{QP: testutil.NewFakeQP(), IRD: 1, ORD: 1,
			PrivateData: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	replies := cli.waitN(cm.EventConnectReply, n)
	// Every request has been answered by now; close the connections that
	// won Accept and let the outside workers finish.
	for _, c := range clients {
		c.Destroy()
	}
	outsideMu.Lock()
	close(outside)
	outsideClosed = true
	outsideMu.Unlock()
	outsideWG.Wait()
	l.Destroy()

	nReject, nAccept := 0, 0
	clock.each(func(id *cm.ID, _ []cm.EventType, rejected bool) {
		id.Destroy()
		_, acc := accepted.Load(id)
		if rejected {
			nReject++
			if acc {
				t.Errorf("%v: both Accept and Reject succeeded", id)
			}
			if late := clock.late(id); len(late) != 0 {
				t.Errorf("%v: %v arrived after Reject returned", id, late)
			}
		}
		if acc {
			nAccept++
		}
	})
	byPD := map[string]int{}
	for _, r := range replies {
		switch r.ev.Status {
		case cm.StatusRejected:
			pd := string(r.ev.PrivateData)
			switch {
			case pd == "out", pd == "", bytes.HasPrefix(r.ev.PrivateData, []byte("in:")):
				byPD[pd[:min(len(pd), 3)]]++
			default:
				t.Errorf("reject private data %q", pd)
			}
		case cm.StatusOK, cm.StatusReset:
		default:
			t.Errorf("reply status %v", r.ev.Status)
		}
	}
	if nReject == 0 || byPD["in:"] == 0 || byPD["out"] == 0 {
		t.Errorf("rejects %d (inside %d, outside %d)", nReject, byPD["in:"], byPD["out"])
	}
	t.Logf("%d requests: %d rejected (%d inside, %d outside, %d by Destroy), %d accepted",
		n, nReject, byPD["in:"], byPD["out"], byPD[""], nAccept)
}

// TestRejectBufferReuse overwrites the private-data buffer right after
// Reject (and Accept, and Connect) returns and checks that the peer got
// the original bytes.
func TestRejectBufferReuse(t *testing.T) {
	dev := newDev(t)
	orig := []byte("the original private data, 40 bytes....")
	buf := bytes.Clone(orig)
	held := make(chan *cm.ID, 1)
	l := listenID(t, dev, cfgT(t, cm.Config{}), 0, func(id *cm.ID, ev *cm.Event) error {
		held <- id
		return nil
	})

	// Reject, seen by a raw peer.
	raw := rawDial(t, l.LocalAddr())
	_, _ = raw.Write(siwBytes(t, "siw-mpa-request.bin"))
	child := <-held
	if err := child.Reject(buf); err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = 'X'
	}
	f, _ := readFrame(t, raw)
	if !f.Reject || !bytes.Equal(f.PrivateData, orig) {
		t.Errorf("peer got %+v %q", f, f.PrivateData)
	}

	// Reject, seen by a gosiw initiator; and Connect's own buffer.
	copy(buf, orig)
	cbuf := bytes.Clone(orig)
	r := newRecorder(t)
	ini := cm.NewID(dev, r.handle)
	defer ini.Destroy()
	if err := ini.Connect(l.LocalAddr().String(), cm.ConnParam{QP: testutil.NewFakeQP(), PrivateData: cbuf}); err != nil {
		t.Fatal(err)
	}
	for i := range cbuf {
		cbuf[i] = 'Y'
	}
	child = <-held
	child.SetContext(nil)
	if err := child.Reject(buf); err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = 'Z'
	}
	rep := r.wait(ini, cm.EventConnectReply).ev
	if rep.Status != cm.StatusRejected || !bytes.Equal(rep.PrivateData, orig) {
		t.Errorf("initiator got %v %q", rep.Status, rep.PrivateData)
	}

	// Accept's buffer.
	copy(buf, orig)
	ini2 := cm.NewID(dev, r.handle)
	defer ini2.Destroy()
	if err := ini2.Connect(l.LocalAddr().String(), cm.ConnParam{QP: testutil.NewFakeQP()}); err != nil {
		t.Fatal(err)
	}
	child = <-held
	if err := child.Accept(cm.ConnParam{QP: testutil.NewFakeQP(), PrivateData: buf}); err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = 'W'
	}
	rep = r.wait(ini2, cm.EventConnectReply).ev
	if rep.Status != cm.StatusOK || !bytes.Equal(rep.PrivateData, orig) {
		t.Errorf("accept: initiator got %v %q", rep.Status, rep.PrivateData)
	}
	child.Destroy()
	// The event's private data is the handler's to keep: overwriting the
	// buffer above did not touch it, and neither does a later event.
	req := r.wait(ini2, cm.EventConnectReply).ev.PrivateData
	if !bytes.Equal(req, orig) {
		t.Errorf("event private data changed: %q", req)
	}
}
