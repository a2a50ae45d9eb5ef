package lb

import (
	"net/netip"
	"testing"
)

func TestHAWords(t *testing.T) {
	for _, c := range []struct {
		in   string
		want HARole
		ok   bool
	}{{"primary", RolePrimary, true}, {"BACKUP", RoleBackup, true}, {"both", RoleBoth, true}, {"secondary", RoleNone, false}} {
		got, err := ParseHARole(c.in)
		if got != c.want || (err == nil) != c.ok {
			t.Errorf("ParseHARole(%q) = %v, %v", c.in, got, err)
		}
	}
	for _, s := range []HAState{HAIdle, HAListen, HAActive, HAStandby, HAPreempt, HANoExecutor} {
		var back HAState
		if err := back.UnmarshalText([]byte(s.String())); err != nil || back != s {
			t.Errorf("state %v reads back as %v, %v", s, back, err)
		}
	}
	if _, err := ParseHARecovery("sometimes"); err == nil {
		t.Error("an unknown recovery strategy parsed")
	}
}

func TestHAGroups(t *testing.T) {
	a := netip.MustParseAddr
	h := HighAvailability{Role: RoleBoth, Heartbeats: []Heartbeat{{Source: a("198.18.0.2"), Destination: a("198.18.0.4")}}}
	mine, theirs := Cluster{PrimaryHost: a("198.18.0.2")}, Cluster{PrimaryHost: a("198.18.0.4")}
	if h.GroupOf(&mine) != GroupLocal || h.GroupOf(&theirs) != GroupPeer || len(h.Groups()) != 2 {
		t.Errorf("both: groups %v %v %v", h.GroupOf(&mine), h.GroupOf(&theirs), h.Groups())
	}
	h.Role = RolePrimary
	if h.GroupOf(&theirs) != GroupLocal || len(h.Groups()) != 1 {
		t.Error("a primary serves every cluster")
	}
	h.Role = RoleBackup
	if h.GroupOf(&mine) != GroupPeer || h.Groups()[0] != GroupPeer {
		t.Error("a backup stands by for every cluster")
	}
	if (HighAvailability{Role: RolePrimary}).Enabled() {
		t.Error("enabled without a heartbeat")
	}
}
