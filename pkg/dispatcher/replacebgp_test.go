package dispatcher

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

// TestReplaceConfiguresTheSpeaker: a configuration file (read as dlbd
// reads one) with a BGP section configures the speaker and announces the
// clusters it marks; a file that changes a neighbour reconfigures it; a
// dry run leaves it alone; a refusal by the speaker changes nothing and is
// placed on the file's line; and a file without the section removes it.
func TestReplaceConfiguresTheSpeaker(t *testing.T) {
	sp := &fakeSpeaker{}
	h := newHarnessWith(t, t.TempDir(), func(o *Options) { o.Speaker = sp })
	base(h)
	written, err := config.MarshalFile(h.config())
	if err != nil {
		t.Fatal(err)
	}
	plain := string(written)
	const section = `bgp:
  asn: 65001
  routerid: 198.18.0.2
  neighbors:
    - address: 198.18.0.1
      remote-as: 65000
      bfd: true
`
	announced := strings.Replace(plain, "    configure: true\n", "    configure: true\n    announce: true\n    communities: ['65000:100']\n    med: 20\n", 1)
	if announced == plain {
		t.Fatalf("no cluster to announce in\n%s", plain)
	}
	read := func(text string) *config.File {
		t.Helper()
		f, err := config.ReadFile([]byte(text), config.Options{})
		if err != nil {
			t.Fatalf("%v\n%s", err, text)
		}
		return f
	}

	f := read(announced + section)
	if _, err := h.replace(f.Config, true); err != nil {
		t.Fatal(err)
	}
	if got := sp.config(); got.Enabled() {
		t.Fatalf("a dry run configured the speaker: %+v", got)
	}
	if _, err := h.replace(f.Config, false); err != nil {
		t.Fatal(err)
	}
	want := f.Config.BGP
	if got := sp.config(); !got.Equal(want) || !got.Neighbors[0].BFD {
		t.Fatalf("speaker configured with %+v, want %+v", got, want)
	}
	eventually(t, "announced", func() bool { return sp.announced() == "198.18.0.100/32 20 65000:100" })
	if got := h.config().BGP; !got.Equal(want) {
		t.Errorf("configuration holds %+v", got)
	}

	// A neighbour's hold time changed, another added.
	f = read(announced + strings.Replace(section, "      bfd: true\n", "      bfd: true\n      holdtime: 30\n", 1) +
		"    - {address: 198.18.0.5, remote-as: 65000, multihop: 2}\n")
	if _, err := h.replace(f.Config, false); err != nil {
		t.Fatal(err)
	}
	if got := sp.config(); len(got.Neighbors) != 2 || got.Neighbors[0].HoldTime != 30 || got.Neighbors[1].Multihop != 2 {
		t.Fatalf("speaker reconfigured with %+v", got)
	}
	before := sp.config()

	// The speaker refuses the router id: nothing changes, and the refusal
	// names the file's line.
	sp.mu.Lock()
	sp.checkErr = lb.Errorf("routerid", "bgp", "198.18.0.9 is not an address of this host")
	sp.mu.Unlock()
	f = read(announced + strings.Replace(section, "198.18.0.2", "198.18.0.9", 1))
	_, err = h.replace(f.Config, false)
	if err == nil {
		t.Fatal("the speaker's refusal was not returned")
	}
	line := strings.Count(announced, "\n") + 3
	if got, want := f.Place(err).Error(), "line "+strconv.Itoa(line)+": bgp.routerid: 198.18.0.9 is not an address of this host"; got != want {
		t.Errorf("placed %q, want %q", got, want)
	}
	if got := sp.config(); !got.Equal(before) {
		t.Errorf("a refused file changed the speaker to %+v", got)
	}
	sp.mu.Lock()
	sp.checkErr = nil
	sp.mu.Unlock()

	// Without the section (and the announcement), the speaker is removed.
	f = read(plain)
	if _, err := h.replace(f.Config, false); err != nil {
		t.Fatal(err)
	}
	if got := sp.config(); got.Enabled() {
		t.Errorf("a file without bgp left the speaker configured: %+v", got)
	}
	if got := h.config(); got.BGP.Enabled() || got.Cluster(netip.MustParseAddr(vip)).Announce {
		t.Errorf("configuration keeps %+v", got.BGP)
	}
}
