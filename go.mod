module github.com/dlbproject/dlb

go 1.26.0

tool github.com/cilium/ebpf/cmd/bpf2go

require (
	github.com/cilium/ebpf v0.22.0 // indirect
	github.com/google/gopacket v1.1.19 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
