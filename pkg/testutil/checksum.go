package testutil

import (
	"encoding/binary"
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// VerifyChecksums decodes an Ethernet frame with gopacket and recomputes,
// with gopacket, every checksum it carries: the IPv4 header's, the TCP,
// UDP, ICMP or ICMPv6 checksum, and for an ICMP error the quoted IPv4
// header's and (when the quote holds the whole quoted packet) the quoted
// TCP/UDP checksum. A zero IPv4 UDP checksum means "none" and is accepted.
// It returns an error naming every checksum that is wrong.
func VerifyChecksums(frame []byte) error {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }

	var nl gopacket.NetworkLayer
	if ip4, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		nl = ip4
		if got, want := ip4.Checksum, ipv4HeaderChecksum(ip4); got != want {
			bad("IPv4 header checksum %#04x, want %#04x", got, want)
		}
	}
	if ip6, ok := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		nl = ip6
	}
	if nl == nil {
		return nil
	}
	if err := verifyTransport(p, nl, "", bad); err != nil {
		return err
	}

	// The packet an ICMP error quotes.
	var quote []byte
	if icmp, ok := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4); ok && isICMPv4Error(icmp.TypeCode.Type()) {
		quote = icmp.Payload
	}
	if icmp, ok := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6); ok && icmp.TypeCode.Type() < 128 && len(icmp.Payload) >= 4 {
		quote = icmp.Payload[4:]
	}
	if len(quote) > 0 {
		first := layers.LayerTypeIPv4
		if quote[0]>>4 == 6 {
			first = layers.LayerTypeIPv6
		}
		q := gopacket.NewPacket(quote, first, gopacket.Default)
		var qnl gopacket.NetworkLayer
		whole := false
		if ip4, ok := q.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok && len(quote) >= int(ip4.IHL)*4 {
			qnl = ip4
			whole = int(ip4.Length) == len(quote)
			if got, want := ip4.Checksum, ipv4HeaderChecksum(ip4); got != want {
				bad("quoted IPv4 header checksum %#04x, want %#04x", got, want)
			}
		}
		if ip6, ok := q.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
			qnl = ip6
			whole = int(ip6.Length)+40 == len(quote)
		}
		if qnl != nil && whole {
			if err := verifyTransport(q, qnl, "quoted ", bad); err != nil {
				return err
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%v", errs)
	}
	return nil
}

func isICMPv4Error(t uint8) bool {
	return t == layers.ICMPv4TypeDestinationUnreachable || t == layers.ICMPv4TypeTimeExceeded ||
		t == layers.ICMPv4TypeParameterProblem || t == layers.ICMPv4TypeSourceQuench || t == layers.ICMPv4TypeRedirect
}

// ipv4HeaderChecksum recomputes an IPv4 header's checksum by serialising
// the header with gopacket.
func ipv4HeaderChecksum(ip4 *layers.IPv4) uint16 {
	c := *ip4
	buf := gopacket.NewSerializeBuffer()
	if err := c.SerializeTo(buf, gopacket.SerializeOptions{ComputeChecksums: true}); err != nil {
		return 0
	}
	return binary.BigEndian.Uint16(buf.Bytes()[10:12])
}

// verifyTransport recomputes the TCP, UDP or ICMP checksum of a decoded
// packet by serialising that layer and its payload with gopacket.
func verifyTransport(p gopacket.Packet, nl gopacket.NetworkLayer, what string, bad func(string, ...any)) error {
	opts := gopacket.SerializeOptions{ComputeChecksums: true}
	buf := gopacket.NewSerializeBuffer()
	switch {
	case p.Layer(layers.LayerTypeTCP) != nil:
		t := *p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if err := t.SetNetworkLayerForChecksum(nl); err != nil {
			return err
		}
		if err := gopacket.SerializeLayers(buf, opts, &t, gopacket.Payload(t.Payload)); err != nil {
			return fmt.Errorf("serialising %sTCP: %w", what, err)
		}
		if want := binary.BigEndian.Uint16(buf.Bytes()[16:]); t.Checksum != want {
			bad("%sTCP checksum %#04x, want %#04x", what, t.Checksum, want)
		}
	case p.Layer(layers.LayerTypeUDP) != nil:
		u := *p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if u.Checksum == 0 {
			if _, v4 := nl.(*layers.IPv4); v4 {
				return nil // no checksum
			}
			bad("%sUDP checksum 0 over IPv6", what)
			return nil
		}
		if err := u.SetNetworkLayerForChecksum(nl); err != nil {
			return err
		}
		if err := gopacket.SerializeLayers(buf, opts, &u, gopacket.Payload(u.Payload)); err != nil {
			return fmt.Errorf("serialising %sUDP: %w", what, err)
		}
		if want := binary.BigEndian.Uint16(buf.Bytes()[6:]); u.Checksum != want {
			bad("%sUDP checksum %#04x, want %#04x", what, u.Checksum, want)
		}
	case p.Layer(layers.LayerTypeICMPv4) != nil:
		i := *p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
		if err := gopacket.SerializeLayers(buf, opts, &i, gopacket.Payload(i.Payload)); err != nil {
			return fmt.Errorf("serialising %sICMP: %w", what, err)
		}
		if want := binary.BigEndian.Uint16(buf.Bytes()[2:]); i.Checksum != want {
			bad("%sICMP checksum %#04x, want %#04x", what, i.Checksum, want)
		}
	case p.Layer(layers.LayerTypeICMPv6) != nil:
		i := *p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
		if err := i.SetNetworkLayerForChecksum(nl); err != nil {
			return err
		}
		// The ICMPv6 layer's contents are its first four bytes; the rest
		// (echo id and sequence, MTU, quote, ND fields) is its payload,
		// whatever layer gopacket decoded it as.
		rest := i.LayerPayload()
		if err := gopacket.SerializeLayers(buf, opts, &i, gopacket.Payload(rest)); err != nil {
			return fmt.Errorf("serialising %sICMPv6: %w", what, err)
		}
		if want := binary.BigEndian.Uint16(buf.Bytes()[2:]); i.Checksum != want {
			bad("%sICMPv6 checksum %#04x, want %#04x", what, i.Checksum, want)
		}
	}
	return nil
}
