package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
)

// pcapngWriter writes a pcapng file (draft-ietf-opsawg-pcapng): one
// section, one Ethernet interface with nanosecond time stamps, and an
// enhanced packet block per packet, its comment saying what the executor
// did with it.
type pcapngWriter struct {
	w io.Writer
}

const (
	pcapngSHB       = 0x0a0d0d0a
	pcapngIDB       = 0x00000001
	pcapngEPB       = 0x00000006
	pcapngOptEnd    = 0
	pcapngOptComm   = 1
	pcapngTSResol   = 9 // if_tsresol
	pcapngOptUserAp = 4 // shb_userappl
	linkEthernet    = 1
	traceSnapLen    = 128
)

// pad4 pads n to a multiple of 4.
func pad4(n int) int { return (n + 3) &^ 3 }

// option encodes one option (code, length, value padded to 4 bytes).
func option(code uint16, v []byte) []byte {
	b := make([]byte, 4+pad4(len(v)))
	binary.LittleEndian.PutUint16(b[0:], code)
	binary.LittleEndian.PutUint16(b[2:], uint16(len(v)))
	copy(b[4:], v)
	return b
}

// block writes a block of type typ with body (a multiple of 4 bytes).
func (p *pcapngWriter) block(typ uint32, body []byte) error {
	n := uint32(12 + len(body))
	b := make([]byte, 0, n)
	b = binary.LittleEndian.AppendUint32(b, typ)
	b = binary.LittleEndian.AppendUint32(b, n)
	b = append(b, body...)
	b = binary.LittleEndian.AppendUint32(b, n)
	_, err := p.w.Write(b)
	return err
}

// newPcapngWriter writes the section header and the interface
// description; app names the writing application.
func newPcapngWriter(w io.Writer, app string) (*pcapngWriter, error) {
	p := &pcapngWriter{w: w}
	shb := binary.LittleEndian.AppendUint32(nil, 0x1a2b3c4d)
	shb = binary.LittleEndian.AppendUint16(shb, 1)
	shb = binary.LittleEndian.AppendUint16(shb, 0)
	shb = binary.LittleEndian.AppendUint64(shb, ^uint64(0)) // section length unknown
	shb = append(shb, option(pcapngOptUserAp, []byte(app))...)
	shb = append(shb, option(pcapngOptEnd, nil)...)
	if err := p.block(pcapngSHB, shb); err != nil {
		return nil, err
	}
	idb := binary.LittleEndian.AppendUint16(nil, linkEthernet)
	idb = binary.LittleEndian.AppendUint16(idb, 0)
	idb = binary.LittleEndian.AppendUint32(idb, traceSnapLen)
	idb = append(idb, option(pcapngTSResol, []byte{9})...) // 10^-9 s
	idb = append(idb, option(pcapngOptEnd, nil)...)
	if err := p.block(pcapngIDB, idb); err != nil {
		return nil, err
	}
	return p, nil
}

// writePacket writes one traced packet.
func (p *pcapngWriter) writePacket(tp api.TracePacket) error {
	t, err := time.Parse(time.RFC3339Nano, tp.Time)
	if err != nil {
		return fmt.Errorf("packet time %q: %w", tp.Time, err)
	}
	ts := uint64(t.UnixNano())
	data := tp.Data
	if len(data) > tp.Length && tp.Length > 0 {
		data = data[:tp.Length]
	}
	epb := binary.LittleEndian.AppendUint32(nil, 0) // interface 0
	epb = binary.LittleEndian.AppendUint32(epb, uint32(ts>>32))
	epb = binary.LittleEndian.AppendUint32(epb, uint32(ts))
	epb = binary.LittleEndian.AppendUint32(epb, uint32(len(data)))
	epb = binary.LittleEndian.AppendUint32(epb, uint32(max(tp.Length, len(data))))
	epb = append(epb, data...)
	epb = append(epb, make([]byte, pad4(len(data))-len(data))...)
	epb = append(epb, option(pcapngOptComm, []byte(traceComment(tp)))...)
	epb = append(epb, option(pcapngOptEnd, nil)...)
	return p.block(pcapngEPB, epb)
}
