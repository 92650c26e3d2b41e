package layers

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/gopacket/gopacket"
	gplayers "github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// packetParser decodes the link, network and TCP headers of a packet.
type packetParser struct {
	p       *gopacket.DecodingLayerParser
	decoded []gopacket.LayerType
	eth     gplayers.Ethernet
	dot1q   gplayers.Dot1Q
	sll     gplayers.LinuxSLL
	sll2    gplayers.LinuxSLL2
	loop    gplayers.Loopback
	ip4     gplayers.IPv4
	ip6     gplayers.IPv6
	tcp     gplayers.TCP
}

func newPacketParser(first gopacket.LayerType) *packetParser {
	pp := &packetParser{}
	pp.p = gopacket.NewDecodingLayerParser(first,
		&pp.eth, &pp.dot1q, &pp.sll, &pp.sll2, &pp.loop, &pp.ip4, &pp.ip6, &pp.tcp)
	pp.p.IgnoreUnsupported = true
	return pp
}

// ErrUnsupportedLinkType is returned for a capture whose link type the
// decoder cannot take apart.
var ErrUnsupportedLinkType = errors.New("layers: unsupported link type")

// firstLayer returns the layer type a packet of link type lt starts with.
func firstLayer(lt gplayers.LinkType, data []byte) (gopacket.LayerType, error) {
	switch lt {
	case gplayers.LinkTypeEthernet:
		return gplayers.LayerTypeEthernet, nil
	case gplayers.LinkTypeLinuxSLL:
		return gplayers.LayerTypeLinuxSLL, nil
	case gplayers.LinkTypeLinuxSLL2:
		return gplayers.LayerTypeLinuxSLL2, nil
	case gplayers.LinkTypeNull, gplayers.LinkTypeLoop:
		return gplayers.LayerTypeLoopback, nil
	case gplayers.LinkTypeIPv4:
		return gplayers.LayerTypeIPv4, nil
	case gplayers.LinkTypeIPv6:
		return gplayers.LayerTypeIPv6, nil
	case gplayers.LinkTypeRaw, 12: // 12: LINKTYPE_RAW as some systems write it
		if len(data) > 0 && data[0]>>4 == 6 {
			return gplayers.LayerTypeIPv6, nil
		}
		return gplayers.LayerTypeIPv4, nil
	}
	return gopacket.LayerTypeZero, fmt.Errorf("%w %d (%v)", ErrUnsupportedLinkType, uint8(lt), lt)
}

// Packet takes the next packet of a capture: its capture info, its octets
// and the link type of the interface it was captured on. Packets that
// hold no TCP segment (other protocols, IP fragments, undecodable headers)
// are counted and skipped. The only error is ErrUnsupportedLinkType.
func (d *StreamDecoder) Packet(ci gopacket.CaptureInfo, data []byte, lt gplayers.LinkType) error {
	d.pkt++
	first, err := firstLayer(lt, data)
	if err != nil {
		return err
	}
	if d.parsers == nil {
		d.parsers = make(map[gopacket.LayerType]*packetParser)
	}
	pp := d.parsers[first]
	if pp == nil {
		pp = newPacketParser(first)
		d.parsers[first] = pp
	}
	if err := pp.p.DecodeLayers(data, &pp.decoded); err != nil {
		return nil // not a packet we can take apart
	}
	var src, dst netip.Addr
	haveIP, haveTCP := false, false
	for _, t := range pp.decoded {
		switch t {
		case gplayers.LayerTypeIPv4:
			if pp.ip4.Flags&gplayers.IPv4MoreFragments != 0 || pp.ip4.FragOffset != 0 {
				return nil // fragments are not reassembled: the stream shows a gap
			}
			src, _ = netip.AddrFromSlice(pp.ip4.SrcIP)
			dst, _ = netip.AddrFromSlice(pp.ip4.DstIP)
			haveIP = true
		case gplayers.LayerTypeIPv6:
			src, _ = netip.AddrFromSlice(pp.ip6.SrcIP)
			dst, _ = netip.AddrFromSlice(pp.ip6.DstIP)
			haveIP = true
		case gplayers.LayerTypeTCP:
			haveTCP = true
		}
	}
	if !haveIP || !haveTCP {
		return nil
	}
	truncated := pp.p.Truncated || ci.CaptureLength < ci.Length
	d.segment(netip.AddrPortFrom(src.Unmap(), uint16(pp.tcp.SrcPort)),
		netip.AddrPortFrom(dst.Unmap(), uint16(pp.tcp.DstPort)), &pp.tcp, truncated)
	return nil
}

// ErrNotCapture is returned for input that is neither pcap nor pcapng.
var ErrNotCapture = errors.New("layers: not a pcap or pcapng file")

// DecodeCapture reads a pcap or pcapng capture (told apart by its magic
// number) with gopacket's pure-Go pcapgo readers, runs every packet
// through a StreamDecoder and passes each record to emit (see Record for
// how long it stays valid). It returns an error when the input is not a
// capture or cannot be read to the end; the records of the packets read
// before the error have been emitted by then, end-of-capture notes
// included.
func DecodeCapture(r io.Reader, emit func(*Record)) error {
	br := bufio.NewReaderSize(r, 1<<16)
	magic, err := br.Peek(4)
	if err != nil {
		if err == io.EOF {
			return fmt.Errorf("%w: file too short", ErrNotCapture)
		}
		return fmt.Errorf("layers: reading capture: %w", err)
	}
	var src interface {
		ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	}
	var linkType func(gopacket.CaptureInfo) gplayers.LinkType
	switch binary.BigEndian.Uint32(magic) {
	case 0x0a0d0d0a: // pcapng Section Header Block
		// Interfaces may differ in link type; every packet is kept so that
		// packet numbers match the file's.
		ng, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true, SkipUnknownVersion: true})
		if err != nil {
			return fmt.Errorf("layers: reading pcapng: %w", err)
		}
		src = ng
		linkType = func(ci gopacket.CaptureInfo) gplayers.LinkType {
			if len(ci.AncillaryData) > 0 {
				if lt, ok := ci.AncillaryData[0].(gplayers.LinkType); ok {
					return lt
				}
			}
			return ng.LinkType()
		}
	case 0xa1b2c3d4, 0xd4c3b2a1, 0xa1b23c4d, 0x4d3cb2a1: // pcap, µs or ns, either byte order
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return fmt.Errorf("layers: reading pcap: %w", err)
		}
		src = pr
		linkType = func(gopacket.CaptureInfo) gplayers.LinkType { return pr.LinkType() }
	default:
		return fmt.Errorf("%w: magic %x", ErrNotCapture, magic)
	}
	d := NewStreamDecoder(emit)
	defer d.Close()
	for {
		data, ci, err := src.ReadPacketData()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("layers: reading packet %d: %w", d.pkt+1, err)
		}
		if err := d.Packet(ci, data, linkType(ci)); err != nil {
			return fmt.Errorf("layers: packet %d: %w", d.pkt, err)
		}
	}
}
