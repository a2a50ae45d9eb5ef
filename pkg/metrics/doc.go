// Package metrics serves dlbd's Prometheus exposition: the load balancer's
// state and counters, read from one engine status snapshot per scrape
// (Engine.Status with the executor's counters: the BPF maps are read then,
// per-CPU values summed), and dlbd's own Go runtime and process metrics
// (client_golang's collectors). Nothing is cached between scrapes.
//
// The counts that come from the engine's sweep of the executor's tables
// (active and half-open connections, table entries, affinity records, NAT
// port use) are as of the latest sweep, which runs every two seconds;
// dlb_executor_last_sweep_timestamp_seconds says when that was.
//
// # Families and their cardinality
//
// Per server of a port (labels cluster, port, server) — 8 series each,
// which is what a configuration of 100,000 servers costs (800,000 series):
//
//	dlb_server_packets_total               counter  packets forwarded (NAT: both directions)
//	dlb_server_bytes_total                 counter  bytes forwarded
//	dlb_server_new_connections_total       counter  connections scheduled to it
//	dlb_server_finished_connections_total  counter  connections that ended (FIN/RST, replaced, expired)
//	dlb_server_active_connections          gauge    established connections
//	dlb_server_configured_weight           gauge    the operator's weight
//	dlb_server_weight                      gauge    the weight the executor uses now (the manager's)
//	dlb_server_state{state}                gauge    1, labelled with the current state: up, down
//	                                                (operator), quiesced, failed (advisor), unresolved
//
// Only the current state has a series (value 1): a server costs one series
// for its state, not one per possible state. Alert on
// dlb_server_state{state!="up"}.
//
// Per port (labels cluster, port) — 16 series each:
//
//	dlb_port_packets_total, dlb_port_bytes_total, dlb_port_new_connections_total,
//	dlb_port_finished_connections_total    counters, as the servers'
//	dlb_port_active_connections            gauge
//	dlb_port_half_open_connections         gauge    SYNs not yet completed (last 30 s)
//	dlb_port_affinity_records              gauge    live affinity records it wrote
//	dlb_port_maglev_table_slots            gauge    0: no server takes new connections
//	dlb_port_alert                         gauge    1 while no server takes new connections (managerAlert)
//	dlb_port_half_open_alert               gauge    1 while half-open connections exceed maxhalfopen
//	dlb_port_manager_proportion_ratio{input}  gauge  the cluster's proportions (active, new, port, system), 0..1
//	dlb_port_manager_change_ratio          gauge    the load-driven weight change the manager's last cycle asked for, 0..1
//	dlb_port_manager_pushed                gauge    1 if the last cycle pushed new weights
//
// Per advisor probe (labels advisor, server, port; one probe per advisor,
// server address and port, whatever the clusters) — 5 series each:
//
//	dlb_advisor_state{state}               gauge    1, labelled up, down or unknown
//	dlb_advisor_load_seconds               gauge    the last probe's load; absent while down or never probed
//	dlb_advisor_probes_total               counter
//	dlb_advisor_probe_failures_total       counter
//	dlb_advisor_probes_unmade_total        counter  probes this host could not make (no NFA, no route, ...)
//
// Per server address a metric server reports on (label server): 2 series,
// and one more per metric the clusters ask for (label metric):
//
//	dlb_metric_server_load_ratio{metric}   gauge    the last report's value, 0..1
//	dlb_metric_server_report_age_seconds   gauge    absent until the first report
//	dlb_metric_server_stale                gauge    1 when there is no report younger than 3 manager intervals
//
// Per address this dispatcher holds that another host answers ARP (IPv6:
// neighbour solicitations) for
// (label address), while it does: 1 series:
//
//	dlb_address_conflict_hosts             gauge    how many other hosts answered
//
// Per NAT return address (label address): 3 series:
//
//	dlb_nat_pool_ports                     gauge    ports in its pool
//	dlb_nat_pool_ports_used{state}         gauge    established (every live NAT connection) and half_open
//
// Fixed sets, whatever the configuration:
//
//	dlb_executor_loaded, dlb_executor_attached                gauges 0/1
//	dlb_executor_packets_total{reason}, dlb_executor_bytes_total{reason}
//	                                       counters, one per executor reason (pass_*, drop_*, fwd_*)
//	dlb_executor_events_total{event}       counter, one per executor event (conn_insert_failed, ...)
//	dlb_executor_table_entries{table}, dlb_executor_table_entries_limit{table}
//	                                       gauges, table conn (MAC connections), nat, half_open, affinity
//	dlb_executor_table_memory_bytes{table} gauge, one per BPF map (kernel memory)
//	dlb_executor_last_sweep_timestamp_seconds
//	dlb_executor_ports_limit, dlb_executor_servers_limit
//	dlb_config_ports, dlb_config_servers   gauges: configured ports and servers (of all ports)
//	dlb_config_changes_total               counter: changes applied since dlbd started
//	dlb_config_last_change_timestamp_seconds
//	dlb_manager_running                    gauge 0/1
//	dlb_manager_interval_seconds           gauge
//	dlb_manager_cycles_total               counter
//	dlb_manager_cycle_duration_seconds     gauge: the latest cycle
//	dlb_metric_server_refused_reports_total{reason}  counter
//	dlb_events_total{event}                counter: serverDown, serverUp, managerAlert, managerClear,
//	                                       halfOpenAlert, halfOpenAlertDone
//	dlb_event_scripts_dropped_total        counter: events whose scripts were not run (too many waiting)
//	dlb_build_info{version,goversion}      gauge 1
//	dlb_warnings                           gauge: the executor report's warnings (conditions that keep the
//	                                       configuration from working as meant, each with its remedy)
//
// With high availability configured (labels group: local, peer; address;
// source and destination of a heartbeat path; reason):
//
//	dlb_ha_running, dlb_ha_healthy, dlb_ha_peer_alive  gauges 0/1
//	dlb_ha_state{group,state}              gauge 1, labelled idle, listen, active, standby, preempt or noexecutor
//	dlb_ha_synced{group}                   gauge 0/1: a full copy of the active peer's tables
//	dlb_ha_config_digest_match             gauge 0/1: the peer serves the same (absent while it is not heard)
//	dlb_ha_role_conflict                   gauge 0/1: the peer's role is inconsistent with this one's (absent while it is not heard)
//	dlb_ha_reach_target_up{address}        gauge 0/1
//	dlb_ha_stray_heartbeats{source,destination}  gauge 1: a path the peer's heartbeats arrive on that this one lacks (absent when none)
//	dlb_ha_heartbeats_sent_total, dlb_ha_heartbeats_received_total{source,destination}  counters
//	dlb_ha_refused_total{reason}           counter
//	dlb_ha_replication_records_sent_total, _received_total, _imported_total  counters
//	dlb_ha_replication_ack_seconds         gauge: the latest marker's acknowledgement
//
// With a BGP speaker (labels neighbor, cluster):
//
//	dlb_bgp_running                        gauge 0/1
//	dlb_bgp_neighbor_up{neighbor}          gauge 0/1: the session is established
//	dlb_bgp_neighbor_prefixes_sent{neighbor}  gauge
//	dlb_bgp_cluster_announced{cluster}     gauge 0/1, for clusters to be announced
//
// and client_golang's go_* and process_* families. docs/dlb-alerts.yml
// has example alerting rules on them.
package metrics
