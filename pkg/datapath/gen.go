//go:build linux

package datapath

// The executor's BPF object and its Go bindings are generated from bpf/ with
// clang-19 and committed, so that building dlb needs no clang. Run
// "make generate" after changing any file under bpf/.
//
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -tags linux -target bpfel -type backend -type vip_key -type vip_meta -type flow_key -type flow -type counters -type reason_counters -type dlb_config -type vip_bloom -type handshake -type dlb_clock -type nat_key -type nat_flow -type nat_rev -type halfopen -type nat_handshake -type affinity_key -type affinity_record -type server_key -type next_hop -type nat_bloom -type tab_bucket -type conn_entry -type conn_ctl -type nat_flow_entry -type nat_port_entry -type nat_ctl -type table_info -type trace_event dispatcher ../../bpf/dispatcher.c -- -I../../bpf/include -I/usr/include/x86_64-linux-gnu -Wall -Werror -mcpu=v3
