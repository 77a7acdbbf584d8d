//! A node's Prometheus endpoint: its state as metrics, and a tiny HTTP server for `/metrics`.
//!
//! [`encode`] turns a [`Snapshot`] (the workers' counters, the ports' statistics, the table
//! sizes, the control plane's status, the log size, PFCP message counts) into the exposition
//! with the `prometheus-client` crate: a fresh registry per scrape whose one collector writes
//! every family from the snapshot. The data plane's counters stay per worker (per core), plain
//! integers each worker publishes now and then (see [`crate::run::drive`]); they are summed
//! here, at scrape time, so counting costs the hot path no shared cache line.
//!
//! Two formats, chosen by the request's `Accept` header ([`Format::from_accept`]):
//! OpenMetrics 1.0.0 (what `prometheus-client` writes, and what a Prometheus server asks for
//! first) and the Prometheus text format 0.0.4 (for everything else: `curl`, `promtool check
//! metrics`), derived from the OpenMetrics text by naming each counter family after its
//! `_total` sample and dropping `# EOF`. Both carry the same samples, so a Prometheus server
//! stores the same series from either.
//!
//! [`serve`] answers `GET /metrics` (and `HEAD`) on a `TcpListener`, one connection at a time
//! on the caller's thread, until a flag is set; see its docs for the limits.
//!
//! ```
//! use sb_node::metrics::{encode, Format, Snapshot};
//! let mut s = Snapshot::default();
//! s.workers = vec![sb_engine::Counters::default(); 2];
//! s.workers[1].upstream = 5;
//! let text = encode(&s, Format::Text).unwrap();
//! assert!(text.contains("\nfivegs_ep_n3_gtp_indatapktn3upf_total 5\n"));
//! ```
//!
//! # The metrics
//!
//! Names follow 3GPP TS 28.552 (as open5gs spells them, lower case, `fivegs_` prefix) where a
//! measurement fits; the others are `scalebricks_*`, with the unit in the name where there is
//! one. A counter's sample carries the `_total` suffix (OpenMetrics), which the table shows.
//! Labels: `port` is `inet`, `ran` (N3, towards the base stations) or `fabric`; `direction`
//! is `rx` or `tx`.
//!
//! Data plane (the engine's counters, summed over the workers):
//!
//! | sample | type | labels | meaning |
//! |---|---|---|---|
//! | `fivegs_ep_n3_gtp_indatapktn3upf_total` | counter | | TS 28.552 GTP.InDataPktN3UPF: G-PDUs received on N3 (`ran`), accepted and decapsulated towards `inet` |
//! | `fivegs_ep_n3_gtp_outdatapktn3upf_total` | counter | | TS 28.552 GTP.OutDataPktN3UPF: G-PDUs this node sent on N3 (downstream packets, every fabric-crossing count) |
//! | `scalebricks_packets_total` | counter | `port`, `direction` | frames the engine took from (`rx`) or gave to (`tx`) the port |
//! | `scalebricks_fabric_forwarded_packets_total` | counter | `port` | frames received on the port that the engine sent on over the fabric |
//! | `scalebricks_host_frames_total` | counter | `port` | frames left to the node's kernel (on the fabric: the kernels' own ARP and IP), not drops |
//! | `scalebricks_dropped_packets_total` | counter | `port`, `reason` | frames received on the port and dropped, by reason (`sb_engine::Drop::label`; `malformed` for every parser error); the reasons of a port sum to all its drops; every reason is present, also at 0 |
//! | `scalebricks_malformed_packets_total` | counter | `reason` | malformed frames by parser error (`sb_wire::WireError::label`), all ports |
//! | `scalebricks_fabric_crossings` | histogram | `le` 0, 1, 2, +Inf | downstream packets sent on N3 by how often they crossed the fabric (the `+Inf` bucket holds 3 or more, counted as 3 in `_sum`) |
//! | `scalebricks_gtpu_echo_responses_total` | counter | | GTP-U Echo Responses sent |
//! | `scalebricks_arp_replies_total` | counter | | ARP requests for the node's addresses answered |
//! | `scalebricks_icmp_errors_total` | counter | | ICMP / ICMPv6 errors sent (TTL expired, packet too big) |
//! | `scalebricks_gtpu_error_indications_total` | counter | | GTP-U Error Indications sent (unknown uplink TEIDs) |
//! | `scalebricks_errors_rate_limited_total` | counter | | error messages the engine's rate limit held back |
//! | `scalebricks_buffered_packets_total` | counter | | downlink packets put into their session's buffer (FAR BUFF; not drops) |
//! | `scalebricks_released_packets_total` | counter | | buffered packets sent on when their session's buffer was flushed |
//! | `scalebricks_gtpu_end_markers_total` | counter | | GTP-U End Markers sent on old tunnels (SNDEM) |
//! | `scalebricks_fragmented_packets_total` | counter | | downlink packets whose outer IPv4 packet was cut into fragments (larger than the N3 link carries, inner IPv4 without DF) |
//! | `scalebricks_outer_fragments_total` | counter | | the fragments those packets left as (each also counted as a packet sent) |
//! | `scalebricks_cp_function_packets_total` | counter | `direction` | G-PDUs of the CP function's paths: `to_cp` (uplink packets a PDR sends to the SMF's F-TEID, handed to the control plane), `from_cp` (packets from the SMF sent out of `ran`) |
//!
//! With the XDP fast path (`io: xdp-fast`, [`Snapshot::xdp`]), what its programs finish is
//! added to the families above where the engine counts the same work:
//! `fivegs_ep_n3_gtp_indatapktn3upf_total` gets the uplink G-PDUs decapsulated in XDP
//! (`up_to_inet`), `fivegs_ep_n3_gtp_outdatapktn3upf_total` and the 0-crossing bucket of
//! `scalebricks_fabric_crossings` the downlink packets encapsulated at their ingress node
//! (`to_ran`; a fabric frame finished in XDP, `fabric_to_ran`, in the 1-crossing bucket, and
//! hash partitioning's second crossing, `fabric_to_ran_2`, in the 2-crossing one),
//! `scalebricks_gtpu_echo_responses_total` the echoes answered in XDP (`echo`). The
//! `scalebricks_packets_total` family stays the engine's own. And:
//!
//! | sample | type | labels | meaning |
//! |---|---|---|---|
//! | `scalebricks_xdp_packets_total` | counter | `counter` | the programs' per-CPU counters, summed (`sb_xdp::Counter` labels): `rx_inet`, `rx_ran` frames seen; `to_ran`, `to_fabric`, `up_to_inet`, `fabric_to_ran`, `fabric_to_ran_2`, `echo` finished in XDP; `slow` passed to the engine, and `slow_*` by reason |
//! | `scalebricks_xdp_attached` | gauge (always 1) | `port`, `mode` | a program attached to the port, `native` or `generic` |
//! | `scalebricks_xdp_generic_fallbacks_total` | counter | | ports attached in generic mode because native attachment failed |
//! | `scalebricks_xdp_enabled` | gauge | | 1 while the programs answer from their maps, 0 after a table write the maps refused (every frame then goes to the engine) |
//! | `scalebricks_xdp_table_write_errors_total` | counter | | table writes the maps refused |
//!
//! Ports (the packet sockets' own statistics, summed over the workers):
//!
//! | sample | type | labels | meaning |
//! |---|---|---|---|
//! | `scalebricks_port_bytes_total` | counter | `port`, `direction` | bytes of the frames received and transmitted |
//! | `scalebricks_port_dropped_packets_total` | counter | `port`, `direction` | frames lost by the port: kernel ring full on receive, frames larger than a buffer or truncated; ring or peer full on transmit |
//! | `scalebricks_port_errors_total` | counter | `port`, `direction` | failed syscalls, malformed ring entries |
//! | `scalebricks_port_af_xdp_packets_total` | counter | `port` | frames received through an AF_XDP socket: the XDP fast path's slow path (`io: xdp-fast`, one worker), or an AF_XDP port (`io: xdp`) |
//!
//! Tables ([`TableSizes`]):
//!
//! | sample | type | labels | meaning |
//! |---|---|---|---|
//! | `fivegs_upffunction_upf_sessionnbr` | gauge | | sessions this node handles: its FIB slice's entries (as open5gs names its session gauge) |
//! | `scalebricks_table_entries` | gauge | `table` | `gpt`: keys of the whole cluster in this node's GPT replica (with the control plane, its count from the owners' pieces and deltas); `fib`: entries of this node's FIB slice; `uplink`: tunnels by TEID |
//! | `scalebricks_table_bytes` | gauge | `table` | memory of the GPT, the FIB slice, the uplink table |
//!
//! Control plane (from [`Snapshot::control`], the control state machine's status as JSON; each
//! family only when its field is there):
//!
//! | sample | type | labels | from the status field |
//! |---|---|---|---|
//! | `scalebricks_gpt_digest_info` | gauge (always 1) | `digest` | `gpt_digest` (a string): the GPT replica's content digest; equal digests, equal GPTs |
//! | `scalebricks_update_lag_deltas` | gauge | `owner` | `owners[].lag` (with `owners[].owner`, else the position), or `lag` as an object `{owner: n}` or an array: deltas received from the owner and not yet applied |
//! | `scalebricks_owner_applied_seq` | gauge | `owner` | `owners[].applied_seq`: the owner's last delta applied |
//! | `scalebricks_resyncs_total` | counter | `owner` | `owners[].resyncs`; without `owners`, a number `resyncs` (no label): ranges resynced from a snapshot piece |
//! | `scalebricks_rib_keys` | gauge | | `rib_keys`: keys of this node's RIB (its range) |
//! | `scalebricks_control_ready` | gauge | | `ready` (1 or 0): the GPT is assembled and every FIB slice received |
//! | `scalebricks_control_epoch` | gauge | | `epoch` |
//! | `scalebricks_update_queue_length` | gauge | | `queued`: updates waiting in this owner's queue |
//! | `scalebricks_applied_updates_total` | counter | | `applied`: updates this owner applied |
//! | `scalebricks_flows_moved_total` | counter | | `flows_moved`: flows of this owner's range moved off nodes that failure detection declared gone |
//! | `scalebricks_flows_given_back_total` | counter | | `flows_given_back`: of those, given back once their node returned |
//! | `scalebricks_flows_moved_away` | gauge | | `moved_away`: moved off a gone node and not given back yet |
//! | `scalebricks_stand_in_flows_total` | counter | | `stand_in_flows`: flows of gone nodes' own ranges this node installed to stand in for them (with replication) |
//! | `scalebricks_stand_in_updates_total` | counter | | `stand_in_updates`: updates of gone nodes' ranges this node applied as their stand-in (changes keeping the handler, deletions) |
//! | `scalebricks_guest_items_stale_total` | counter | | `guest_items_stale`: stand-ins' FIB items this handler dropped because the range's home was back |
//! | `scalebricks_owner_step_downs_total` | counter | | `step_downs`: times this owner stopped leading its range's group with no other replica leading (check-quorum), and waited instead of restarting |
//! | `scalebricks_lease_losses_total` | counter | | `lease_losses`: times this node lost its safe lease (failure detection: too few peers' leases left) |
//! | `scalebricks_lease_recoveries_total` | counter | | `lease_recoveries`: lost safe leases after which every peer said it had not declared this node gone, so it went on without a fence |
//! | `scalebricks_rejected_updates_total` | counter | `outcome` | `rejected` (an object): updates refused, by outcome |
//! | `scalebricks_control_dropped_datagrams_total` | counter | `reason` | `dropped` (an object): control datagrams dropped, by reason |
//! | `scalebricks_control_retransmits_total` | counter | | `retransmits` |
//! | `scalebricks_log_bytes` | gauge | | [`Snapshot::log_bytes`]: bytes of the node's update log |
//! | `scalebricks_memory_bytes` | gauge | `structure` | `memory` (an object of numbers, a nested object's fields named `outer_inner`): what grows with the keys beside the tables, by structure (`sb_control::Memory`; under `pfcp`, the PFCP endpoint's `sb_pfcp::Memory`). `table_rib_entries` is part of `table_rib`; `pfcp_packed` is the kept sessions' bytes and `pfcp_packed_chunks` what holds them (the session slab's pools of 64 KiB chunks, and glibc's chunks for the few longer than 255 bytes); `pfcp_sessions` is the slab's slots |
//!
//! PFCP (from [`Snapshot::pfcp`], message counts keyed by [`PfcpKey`]; absent without it). The
//! keys are snake_case names: `message` a TS 29.244 message type
//! (`session_establishment_request`, `heartbeat_response`, ...), `cause` a TS 29.244 cause
//! (`request_accepted`, `mandatory_ie_missing`, ...) or empty where the message has none:
//!
//! | sample | type | labels | meaning |
//! |---|---|---|---|
//! | `scalebricks_pfcp_sessions` | gauge | | PFCP sessions this node's endpoint holds, established, whether or not their downlink forwards yet |
//! | `scalebricks_pfcp_messages_total` | counter | `message`, `cause` | PFCP messages by type and cause; in a cluster of several nodes also the relays between the endpoints (`sb_pfcp::relay`, `cause` empty): `relay_out` (requests relayed to the node holding their session, associations replicated), `relay_in` (relays handled), `relay_refused` (not authenticated or malformed); and the response cache (`cause` empty): `answered_from_cache` (retransmissions answered with the response they got), `retransmission_in_flight` (retransmissions dropped while their change is installed), `cache_forgotten` (responses forgotten when their peer set up an association anew); and the peers (`cause` empty): `heartbeat_sent` (our Heartbeat Requests to the SMFs that associated with this node), `peer_dead` (an SMF left 3 in a row unanswered), `peer_restart` (an SMF's Recovery Time Stamp changed), `peer_sessions_deleted` (sessions deleted because their SMF restarted or was released), `peer_released` (SMFs released after the dead-peer grace), `release_part` (parts of at most 4,096 sessions of a release or a restarted SMF's purge handed to the cluster, one at a time), `release_part_refused` (parts the cluster refused: tried again a second later, or the SMF's own release answered with the failure), `peer_refused` (messages from addresses outside `--smf-allow`, not handled), `takeover_refused` (Association Setups refused because another address holds the Node ID); and the CP function's paths (`cause` empty): `cp_uplink` (UE packets tunnelled to the SMF), `cp_downlink` (the SMF's G-PDUs sent down a UE's tunnel), `cp_unmatched` (either, with no session path for it) |
//! | `fivegs_upffunction_sm_n4sessionestabreq_total` | counter | | TS 28.552 SM.N4SessionEstabReq: the `session_establishment_request` counts |
//! | `fivegs_upffunction_sm_n4sessionestabfail_total` | counter | `cause` | TS 28.552 SM.N4SessionEstabFail: `session_establishment_response` counts whose cause is not `request_accepted` |
//!
//! Label values that come from outside the crate (owners, digests, outcomes, reasons, PFCP
//! names) are cut to 64 characters of `[A-Za-z0-9_.:-]` (anything else becomes `_`), because
//! `prometheus-client` writes label values as they are.

use crate::mirror::XdpReport;
use crate::run::TableSizes;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use sb_engine::{Counters, Drop, PortId};
use sb_io::PortStats;
use sb_wire::WireError;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A PFCP message count's key: message type and cause, snake_case (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PfcpKey {
    /// TS 29.244 message type, e.g. `session_establishment_request`.
    pub message: String,
    /// TS 29.244 cause, e.g. `request_accepted`; empty for messages without one.
    pub cause: String,
}

/// What a scrape shows: a node's state at one moment. Everything is summed or read at encode
/// time; absent parts (`None`, empty) leave their families out, except the data-plane and
/// table families, which are always there (zero without workers).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The engine counters, one per worker (what each last published).
    pub workers: Vec<Counters>,
    /// The ports' own statistics, one `[inet, ran, fabric]` per worker.
    pub ports: Vec<[PortStats; 3]>,
    /// Table sizes.
    pub tables: TableSizes,
    /// The control plane's status (a JSON object; see the module docs for the fields read).
    pub control: Option<Value>,
    /// Bytes of the node's update log.
    pub log_bytes: Option<u64>,
    /// PFCP message counts by type and cause.
    pub pfcp: Option<BTreeMap<PfcpKey, u64>>,
    /// The PFCP sessions the node's endpoint holds, established (whether or not their
    /// downlink forwards yet).
    pub pfcp_sessions: Option<u64>,
    /// The XDP fast path's state and counters (`io: xdp-fast`; None without it).
    pub xdp: Option<XdpReport>,
}

/// An exposition format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0.0 text, as `prometheus-client` writes it.
    OpenMetrics,
    /// The Prometheus text format 0.0.4.
    Text,
}

impl Format {
    /// The format for a request's `Accept` header: OpenMetrics if it names
    /// `application/openmetrics-text` (with a q-value above 0), else text 0.0.4.
    pub fn from_accept(accept: Option<&str>) -> Format {
        let wants_om = accept.is_some_and(|a| {
            a.split(',').any(|r| {
                let mut parts = r.split(';').map(str::trim);
                let mt = parts.next().unwrap_or("");
                let q_zero = parts.any(|p| {
                    p.strip_prefix("q=")
                        .and_then(|q| q.parse::<f64>().ok())
                        .is_some_and(|q| q <= 0.0)
                });
                mt.eq_ignore_ascii_case("application/openmetrics-text") && !q_zero
            })
        });
        if wants_om {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    /// The response's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The exposition of `s` in format `f`. Fails only if the encoder does (it writes to a
/// `String`, so in practice never).
pub fn encode(s: &Snapshot, f: Format) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector(s.clone())));
    let mut om = String::with_capacity(16 * 1024);
    prometheus_client::encoding::text::encode(&mut om, &registry)?;
    Ok(match f {
        Format::OpenMetrics => om,
        Format::Text => openmetrics_to_text(&om),
    })
}

/// OpenMetrics text as `prometheus-client` writes it to the Prometheus text format 0.0.4: a
/// counter family `x` (samples `x_total`) becomes family `x_total`; `# UNIT` and `# EOF`
/// lines go. Histograms, gauges and label syntax are the same in both.
fn openmetrics_to_text(om: &str) -> String {
    let counters: std::collections::HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = line
            .strip_prefix("# HELP ")
            .map(|r| ("# HELP ", r))
            .or_else(|| line.strip_prefix("# TYPE ").map(|r| ("# TYPE ", r)));
        match meta {
            Some((kind, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(kind);
                out.push_str(name);
                if counters.contains(name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// A label value from outside: at most 64 characters of `[A-Za-z0-9_.:-]`.
fn clean(s: &str) -> String {
    s.chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

type Labels = Vec<(&'static str, String)>;

/// Writes one family of counters or gauges: `rows` of (labels, value); a row without labels
/// must be the family's only one.
fn family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    ty: MetricType,
    rows: impl IntoIterator<Item = (Labels, u64)>,
) -> Result<(), std::fmt::Error> {
    let write = |e: MetricEncoder, v: u64| match ty {
        MetricType::Counter => ConstCounter::new(v).encode(e),
        _ => ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(e),
    };
    let mut m = enc.encode_descriptor(name, help, None, ty)?;
    for (labels, v) in rows {
        if labels.is_empty() {
            // A family without labels has one sample: the descriptor's own.
            return write(m, v);
        }
        write(m.encode_family(&labels)?, v)?;
    }
    Ok(())
}

fn one(v: u64) -> [(Labels, u64); 1] {
    [(Vec::new(), v)]
}

fn port_label(p: PortId) -> (&'static str, String) {
    ("port", p.label().to_string())
}

/// Writes every family from the snapshot it holds.
#[derive(Debug)]
struct SnapshotCollector(Snapshot);

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let mut c = Counters::default();
        for w in &s.workers {
            c.add(w);
        }
        if let Some(x) = &s.xdp {
            // What the fast path finished counts where the engine's own work does (N3
            // G-PDUs both ways, the crossings, echo answers).
            c.upstream += x.counter("up_to_inet");
            c.crossings[0] += x.counter("to_ran");
            c.crossings[1] += x.counter("fabric_to_ran");
            // Hash partitioning's second crossing (lookup node, then the egress node).
            c.crossings[2] += x.counter("fabric_to_ran_2");
            c.echo_replies += x.counter("echo");
        }
        data_plane(&mut enc, &c)?;
        ports(&mut enc, &s.ports)?;
        tables(&mut enc, &s.tables)?;
        if let Some(st) = &s.control {
            control(&mut enc, st)?;
        }
        if let Some(b) = s.log_bytes {
            family(
                &mut enc,
                "scalebricks_log_bytes",
                "Bytes of the node's update log.",
                MetricType::Gauge,
                one(b),
            )?;
        }
        if let Some(p) = &s.pfcp {
            pfcp(&mut enc, p)?;
        }
        if let Some(n) = s.pfcp_sessions {
            family(
                &mut enc,
                "scalebricks_pfcp_sessions",
                "PFCP sessions this node's endpoint holds (established; their downlink may not forward yet).",
                MetricType::Gauge,
                one(n),
            )?;
        }
        if let Some(x) = &s.xdp {
            xdp(&mut enc, x)?;
        }
        Ok(())
    }
}

fn xdp(enc: &mut DescriptorEncoder, x: &XdpReport) -> Result<(), std::fmt::Error> {
    family(
        enc,
        "scalebricks_xdp_packets",
        "The XDP fast path's counters (per CPU, summed), by counter: frames seen (rx_*), finished in XDP (to_ran, to_fabric, up_to_inet, fabric_to_ran, echo), passed to the engine (slow, and slow_* by reason).",
        MetricType::Counter,
        x.counters
            .iter()
            .map(|(l, v)| (vec![("counter", clean(l))], *v)),
    )?;
    family(
        enc,
        "scalebricks_xdp_attached",
        "XDP programs attached, by port and mode (native or generic); always 1.",
        MetricType::Gauge,
        x.attached
            .iter()
            .map(|(p, m)| (vec![("port", clean(p)), ("mode", clean(m))], 1)),
    )?;
    family(
        enc,
        "scalebricks_xdp_generic_fallbacks",
        "Ports whose XDP program runs in generic mode because native attachment failed.",
        MetricType::Counter,
        one(x.generic_fallbacks),
    )?;
    family(
        enc,
        "scalebricks_xdp_enabled",
        "1 while the XDP programs answer from their maps; 0 after a table write failed (every frame to the engine).",
        MetricType::Gauge,
        one(u64::from(x.enabled)),
    )?;
    family(
        enc,
        "scalebricks_xdp_table_write_errors",
        "Table writes the XDP maps refused (each turns the fast path off).",
        MetricType::Counter,
        one(x.write_errors),
    )
}

fn data_plane(enc: &mut DescriptorEncoder, c: &Counters) -> Result<(), std::fmt::Error> {
    use MetricType::Counter;
    let out_n3: u64 = c.crossings.iter().sum();
    family(
        enc,
        "fivegs_ep_n3_gtp_indatapktn3upf",
        "G-PDUs received on N3 (the ran port), accepted and decapsulated (TS 28.552 GTP.InDataPktN3UPF).",
        Counter,
        one(c.upstream),
    )?;
    family(
        enc,
        "fivegs_ep_n3_gtp_outdatapktn3upf",
        "G-PDUs sent on N3 (the ran port) (TS 28.552 GTP.OutDataPktN3UPF).",
        Counter,
        one(out_n3),
    )?;
    let per_port_dir = |f: &dyn Fn(PortId) -> (u64, u64)| {
        PortId::ALL
            .into_iter()
            .flat_map(|p| {
                let (rx, tx) = f(p);
                [
                    (vec![port_label(p), ("direction", "rx".into())], rx),
                    (vec![port_label(p), ("direction", "tx".into())], tx),
                ]
            })
            .collect::<Vec<_>>()
    };
    family(
        enc,
        "scalebricks_packets",
        "Frames the engine took from (rx) or gave to (tx) each port.",
        Counter,
        per_port_dir(&|p| (c.ports[p as usize].rx, c.ports[p as usize].tx)),
    )?;
    family(
        enc,
        "scalebricks_fabric_forwarded_packets",
        "Frames received on each port that the engine sent on over the fabric.",
        Counter,
        PortId::ALL
            .into_iter()
            .map(|p| (vec![port_label(p)], c.ports[p as usize].to_fabric)),
    )?;
    family(
        enc,
        "scalebricks_host_frames",
        "Frames on each port left to the node's own kernel (on the fabric: the kernels' own ARP and IP), not drops.",
        Counter,
        PortId::ALL
            .into_iter()
            .map(|p| (vec![port_label(p)], c.ports[p as usize].host)),
    )?;
    let mut drops = Vec::new();
    for p in PortId::ALL {
        let i = p as usize;
        let mut named = 0u64;
        for (j, d) in Drop::OTHERS.iter().enumerate() {
            if *d == Drop::Host {
                continue; // not a drop: `scalebricks_host_frames`
            }
            named += c.drops[i][j];
            drops.push((
                vec![port_label(p), ("reason", d.label().to_string())],
                c.drops[i][j],
            ));
        }
        // `dropped` counts every reason; the malformed ones are kept by parser error only.
        drops.push((
            vec![port_label(p), ("reason", "malformed".to_string())],
            c.ports[i].dropped.saturating_sub(named),
        ));
    }
    family(
        enc,
        "scalebricks_dropped_packets",
        "Frames received on each port and dropped, by reason.",
        Counter,
        drops,
    )?;
    family(
        enc,
        "scalebricks_malformed_packets",
        "Malformed frames by parser error, all ports.",
        Counter,
        WireError::ALL.iter().map(|e| {
            (
                vec![("reason", e.label().to_string())],
                c.malformed[e.index()],
            )
        }),
    )?;
    // The crossings histogram: buckets 0, 1, 2 and +Inf (3 or more, counted as 3 in the sum).
    let h = ConstHistogram {
        buckets: [
            (0.0, c.crossings[0]),
            (1.0, c.crossings[1]),
            (2.0, c.crossings[2]),
            (f64::MAX, c.crossings[3]),
        ],
    };
    let m = enc.encode_descriptor(
        "scalebricks_fabric_crossings",
        "Downstream packets sent on N3 by the number of fabric crossings.",
        None,
        MetricType::Histogram,
    )?;
    h.encode(m)?;
    family(
        enc,
        "scalebricks_gtpu_echo_responses",
        "GTP-U Echo Responses sent.",
        Counter,
        one(c.echo_replies),
    )?;
    family(
        enc,
        "scalebricks_arp_replies",
        "ARP requests for this node's addresses answered.",
        Counter,
        one(c.arp_replies),
    )?;
    family(
        enc,
        "scalebricks_icmp_errors",
        "ICMP / ICMPv6 errors sent about dropped packets (TTL expired, too big).",
        Counter,
        one(c.icmp_errors),
    )?;
    family(
        enc,
        "scalebricks_gtpu_error_indications",
        "GTP-U Error Indications sent (uplink G-PDUs with an unknown TEID).",
        Counter,
        one(c.error_indications),
    )?;
    family(
        enc,
        "scalebricks_errors_rate_limited",
        "Error messages (ICMP, Error Indications) the rate limit held back.",
        Counter,
        one(c.errors_rate_limited),
    )?;
    family(
        enc,
        "scalebricks_buffered_packets",
        "Downlink packets put into their session's buffer (FAR BUFF; not drops).",
        Counter,
        one(c.buffered),
    )?;
    family(
        enc,
        "scalebricks_released_packets",
        "Buffered packets sent on when their session's buffer was flushed.",
        Counter,
        one(c.released),
    )?;
    family(
        enc,
        "scalebricks_gtpu_end_markers",
        "GTP-U End Markers sent on old tunnels (SNDEM).",
        Counter,
        one(c.end_markers),
    )?;
    family(
        enc,
        "scalebricks_fragmented_packets",
        "Downlink packets whose outer IPv4 packet was cut into fragments (larger than the N3 link carries).",
        Counter,
        one(c.fragmented),
    )?;
    family(
        enc,
        "scalebricks_outer_fragments",
        "The outer IPv4 fragments those packets left as (each also a packet sent).",
        Counter,
        one(c.fragments),
    )?;
    family(
        enc,
        "scalebricks_cp_function_packets",
        "G-PDUs of the CP function's paths: to_cp (uplink, to the SMF's F-TEID), from_cp (from the SMF, out of ran).",
        Counter,
        [
            (vec![("direction", "to_cp".to_string())], c.to_cp),
            (vec![("direction", "from_cp".to_string())], c.from_cp),
        ],
    )
}

/// A histogram with fixed bucket counts (not cumulative; the last bound is `f64::MAX`, +Inf).
#[derive(Debug)]
struct ConstHistogram {
    buckets: [(f64, u64); 4],
}

impl EncodeMetric for ConstHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let count: u64 = self.buckets.iter().map(|b| b.1).sum();
        let sum: f64 = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| i as f64 * b.1 as f64)
            .sum();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &self.buckets, None)
    }
    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

fn ports(enc: &mut DescriptorEncoder, workers: &[[PortStats; 3]]) -> Result<(), std::fmt::Error> {
    let mut sum = [PortStats::default(); 3];
    for w in workers {
        for (a, b) in sum.iter_mut().zip(w) {
            a.rx_bytes += b.rx_bytes;
            a.tx_bytes += b.tx_bytes;
            a.rx_dropped += b.rx_dropped + b.rx_truncated;
            a.tx_dropped += b.tx_dropped;
            a.rx_errors += b.rx_errors;
            a.tx_errors += b.tx_errors;
            a.rx_af_xdp += b.rx_af_xdp;
        }
    }
    let rows = |f: &dyn Fn(&PortStats) -> (u64, u64)| {
        PortId::ALL
            .into_iter()
            .flat_map(|p| {
                let (rx, tx) = f(&sum[p as usize]);
                [
                    (vec![port_label(p), ("direction", "rx".into())], rx),
                    (vec![port_label(p), ("direction", "tx".into())], tx),
                ]
            })
            .collect::<Vec<_>>()
    };
    family(
        enc,
        "scalebricks_port_bytes",
        "Bytes of the frames each port received (rx) and transmitted (tx).",
        MetricType::Counter,
        rows(&|s| (s.rx_bytes, s.tx_bytes)),
    )?;
    family(
        enc,
        "scalebricks_port_dropped_packets",
        "Frames each port lost: receive ring full, frame larger than a buffer or truncated (rx); ring or peer full (tx).",
        MetricType::Counter,
        rows(&|s| (s.rx_dropped, s.tx_dropped)),
    )?;
    family(
        enc,
        "scalebricks_port_errors",
        "Failed syscalls and malformed ring entries of each port.",
        MetricType::Counter,
        rows(&|s| (s.rx_errors, s.tx_errors)),
    )?;
    family(
        enc,
        "scalebricks_port_af_xdp_packets",
        "Frames each port received through an AF_XDP socket: the XDP fast path's slow path (or an AF_XDP port).",
        MetricType::Counter,
        PortId::ALL
            .into_iter()
            .map(|p| (vec![port_label(p)], sum[p as usize].rx_af_xdp))
            .collect::<Vec<_>>(),
    )
}

fn tables(enc: &mut DescriptorEncoder, t: &TableSizes) -> Result<(), std::fmt::Error> {
    let table = |n: &str| vec![("table", n.to_string())];
    family(
        enc,
        "fivegs_upffunction_upf_sessionnbr",
        "Sessions this node handles: the entries of its FIB slice.",
        MetricType::Gauge,
        one(t.fib_entries as u64),
    )?;
    family(
        enc,
        "scalebricks_table_entries",
        "Keys of the GPT (the cluster's), entries of this node's FIB slice and uplink table.",
        MetricType::Gauge,
        [
            (table("gpt"), t.gpt_keys),
            (table("fib"), t.fib_entries as u64),
            (table("uplink"), t.uplink_entries as u64),
        ],
    )?;
    family(
        enc,
        "scalebricks_table_bytes",
        "Memory of the GPT, the FIB slice and the uplink table.",
        MetricType::Gauge,
        [
            (table("gpt"), t.gpt_bytes as u64),
            (table("fib"), t.fib_bytes as u64),
            (table("uplink"), t.uplink_bytes as u64),
        ],
    )
}

/// A non-negative integer from JSON (floats truncated; negatives and others: none).
fn uint(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        Value::Bool(b) => Some(u64::from(*b)),
        _ => None,
    }
}

/// A label value from JSON: a string as it is, a number as written.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(clean(s)),
        Value::Number(n) => Some(clean(&n.to_string())),
        _ => None,
    }
}

/// Rows of a per-key map field (`{key: n}`) under label `label`.
fn map_rows(v: &Value, label: &'static str) -> Option<Vec<(Labels, u64)>> {
    let o = v.as_object()?;
    Some(
        o.iter()
            .filter_map(|(k, n)| Some((vec![(label, clean(k))], uint(n)?)))
            .collect(),
    )
}

fn control(enc: &mut DescriptorEncoder, st: &Value) -> Result<(), std::fmt::Error> {
    use MetricType::{Counter, Gauge};
    if let Some(d) = text(&st["gpt_digest"]) {
        family(
            enc,
            "scalebricks_gpt_digest_info",
            "The GPT replica's content digest (value always 1): equal digests, equal GPTs.",
            Gauge,
            [(vec![("digest", d)], 1)],
        )?;
    }
    // Per owner: `owners: [{owner, lag, applied_seq, resyncs}]`, or `lag` as a map or array.
    let owners: Vec<(String, &Value)> = st["owners"]
        .as_array()
        .map(|a| {
            a.iter()
                .enumerate()
                .map(|(i, o)| (text(&o["owner"]).unwrap_or_else(|| i.to_string()), o))
                .collect()
        })
        .unwrap_or_default();
    let per_owner = |field: &str| -> Vec<(Labels, u64)> {
        owners
            .iter()
            .filter_map(|(k, o)| Some((vec![("owner", k.clone())], uint(&o[field])?)))
            .collect()
    };
    let mut lag = per_owner("lag");
    if lag.is_empty() {
        lag = match &st["lag"] {
            Value::Array(a) => a
                .iter()
                .enumerate()
                .filter_map(|(i, n)| Some((vec![("owner", i.to_string())], uint(n)?)))
                .collect(),
            v => map_rows(v, "owner").unwrap_or_default(),
        };
    }
    if !lag.is_empty() {
        family(
            enc,
            "scalebricks_update_lag_deltas",
            "Deltas received from each owner and not yet applied.",
            Gauge,
            lag,
        )?;
    }
    let applied_seq = per_owner("applied_seq");
    if !applied_seq.is_empty() {
        family(
            enc,
            "scalebricks_owner_applied_seq",
            "Each owner's last delta applied.",
            Gauge,
            applied_seq,
        )?;
    }
    let mut resyncs = per_owner("resyncs");
    if resyncs.is_empty() {
        resyncs.extend(uint(&st["resyncs"]).map(|n| (Vec::new(), n)));
    }
    if !resyncs.is_empty() {
        family(
            enc,
            "scalebricks_resyncs",
            "Ranges resynced from a snapshot piece.",
            Counter,
            resyncs,
        )?;
    }
    // `memory: {structure: bytes, pfcp: {structure: bytes}}`, flattened.
    let mut memory: Vec<(Labels, u64)> = Vec::new();
    if let Some(m) = st["memory"].as_object() {
        for (k, v) in m {
            match v.as_object() {
                Some(inner) => memory.extend(inner.iter().filter_map(|(ik, iv)| {
                    Some((vec![("structure", clean(&format!("{k}_{ik}")))], uint(iv)?))
                })),
                None => memory.extend(uint(v).map(|n| (vec![("structure", clean(k))], n))),
            }
        }
    }
    if !memory.is_empty() {
        family(
            enc,
            "scalebricks_memory_bytes",
            "Bytes of what grows with the keys beside the tables, by structure.",
            Gauge,
            memory,
        )?;
    }
    let scalars: [(&str, &str, &str, MetricType); 14] = [
        (
            "rib_keys",
            "scalebricks_rib_keys",
            "Keys of this node's RIB (its range).",
            Gauge,
        ),
        (
            "ready",
            "scalebricks_control_ready",
            "1 once the GPT is assembled and every FIB slice received.",
            Gauge,
        ),
        (
            "epoch",
            "scalebricks_control_epoch",
            "The control plane's epoch.",
            Gauge,
        ),
        (
            "queued",
            "scalebricks_update_queue_length",
            "Updates waiting in this owner's queue.",
            Gauge,
        ),
        (
            "applied",
            "scalebricks_applied_updates",
            "Updates this owner applied.",
            Counter,
        ),
        (
            "flows_moved",
            "scalebricks_flows_moved",
            "Flows of this owner's range moved off nodes declared gone, to live ones.",
            Counter,
        ),
        (
            "flows_given_back",
            "scalebricks_flows_given_back",
            "Flows this owner gave back to their node once it returned.",
            Counter,
        ),
        (
            "moved_away",
            "scalebricks_flows_moved_away",
            "Flows of this owner's range moved off a gone node and not given back yet.",
            Gauge,
        ),
        (
            "stand_in_flows",
            "scalebricks_stand_in_flows",
            "Flows of gone nodes' own ranges this node installed to stand in for them.",
            Counter,
        ),
        (
            "stand_in_updates",
            "scalebricks_stand_in_updates",
            "Updates of gone nodes' ranges this node applied as their stand-in.",
            Counter,
        ),
        (
            "guest_items_stale",
            "scalebricks_guest_items_stale",
            "Stand-ins' FIB items this handler dropped because the range's home was back.",
            Counter,
        ),
        (
            "step_downs",
            "scalebricks_owner_step_downs",
            "Times this owner stopped leading its range's group with no other replica leading.",
            Counter,
        ),
        (
            "lease_losses",
            "scalebricks_lease_losses",
            "Times this node lost its safe lease (failure detection).",
            Counter,
        ),
        (
            "lease_recoveries",
            "scalebricks_lease_recoveries",
            "Lost safe leases after which every peer said it had not declared this node gone (no fence).",
            Counter,
        ),
    ];
    for (field, name, help, ty) in scalars {
        if let Some(n) = uint(&st[field]) {
            family(enc, name, help, ty, one(n))?;
        }
    }
    if let Some(rows) = map_rows(&st["rejected"], "outcome") {
        family(
            enc,
            "scalebricks_rejected_updates",
            "Updates refused, by outcome.",
            Counter,
            rows,
        )?;
    }
    if let Some(rows) = map_rows(&st["dropped"], "reason") {
        family(
            enc,
            "scalebricks_control_dropped_datagrams",
            "Control datagrams dropped, by reason.",
            Counter,
            rows,
        )?;
    }
    if let Some(n) = uint(&st["retransmits"]) {
        family(
            enc,
            "scalebricks_control_retransmits",
            "Control datagrams sent again.",
            Counter,
            one(n),
        )?;
    }
    Ok(())
}

fn pfcp(enc: &mut DescriptorEncoder, p: &BTreeMap<PfcpKey, u64>) -> Result<(), std::fmt::Error> {
    family(
        enc,
        "scalebricks_pfcp_messages",
        "PFCP messages by type and cause.",
        MetricType::Counter,
        p.iter().map(|(k, n)| {
            (
                vec![("message", clean(&k.message)), ("cause", clean(&k.cause))],
                *n,
            )
        }),
    )?;
    let estab_req: u64 = p
        .iter()
        .filter(|(k, _)| k.message == "session_establishment_request")
        .map(|(_, n)| n)
        .sum();
    family(
        enc,
        "fivegs_upffunction_sm_n4sessionestabreq",
        "PFCP Session Establishment Requests received (TS 28.552 SM.N4SessionEstabReq).",
        MetricType::Counter,
        one(estab_req),
    )?;
    let mut fail: BTreeMap<String, u64> = BTreeMap::new();
    for (k, n) in p {
        if k.message == "session_establishment_response" && k.cause != "request_accepted" {
            *fail.entry(clean(&k.cause)).or_default() += n;
        }
    }
    family(
        enc,
        "fivegs_upffunction_sm_n4sessionestabfail",
        "PFCP Session Establishments refused, by cause (TS 28.552 SM.N4SessionEstabFail).",
        MetricType::Counter,
        fail.into_iter().map(|(c, n)| (vec![("cause", c)], n)),
    )
}

/// Largest request head (request line and headers) [`serve`] reads.
pub const MAX_REQUEST_BYTES: usize = 8192;

/// How long [`serve`] waits for a whole request, and for a response to be taken.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Serves the metrics on `listener` until `stop` is set (checked at least every 50 ms): `GET
/// /metrics` (a query string is ignored) answers 200 with [`encode`]`(snapshot(), format)` in
/// the format the `Accept` header asks for ([`Format::from_accept`]); `HEAD /metrics` the same
/// headers; another path 404; another method 405; a request that is not HTTP/1.x, or whose
/// head is not UTF-8, 400; a head over [`MAX_REQUEST_BYTES`] 431. Every response closes the
/// connection. One connection at a time, on the caller's thread; a client that does not send
/// its whole request within [`IO_TIMEOUT`] is dropped without an answer (so a stalled client
/// delays the next scrape at most that long). Errors on one connection end that connection
/// only; the function returns an error only if the listener cannot be made non-blocking.
pub fn serve<F>(listener: TcpListener, stop: &AtomicBool, snapshot: F) -> std::io::Result<()>
where
    F: Fn() -> Snapshot,
{
    listener.set_nonblocking(true)?;
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = handle(stream, &snapshot);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // EMFILE, ECONNABORTED and the like: wait a little and go on.
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    Ok(())
}

/// The fuzz target's entry (`fuzz/`, target `metrics_input`): `data` as a request
/// head, as an `Accept` header, and, if it is JSON, as the control status of a snapshot to
/// encode. Panics only if one of them does.
#[doc(hidden)]
pub fn fuzz_input(data: &[u8]) {
    let _ = parse_request(data);
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = Format::from_accept(Some(s));
        if let Ok(v) = serde_json::from_str::<Value>(s) {
            let snap = Snapshot {
                control: Some(v),
                ..Snapshot::default()
            };
            let _ = encode(&snap, Format::Text);
        }
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    Metrics { head: bool, format: Format },
    NotFound,
    BadMethod,
    Bad,
}

/// Parses a request head (everything before the blank line).
fn parse_request(head: &[u8]) -> Request {
    let Ok(head) = std::str::from_utf8(head) else {
        return Request::Bad;
    };
    let mut lines = head.split("\r\n");
    let mut parts = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Request::Bad;
    };
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1") || target.is_empty() {
        return Request::Bad;
    }
    let mut accept = None;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            return Request::Bad;
        };
        if k.trim().eq_ignore_ascii_case("accept") {
            accept = Some(v.trim());
        }
    }
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Request::BadMethod,
    };
    let path = target.split('?').next().unwrap_or("");
    if path != "/metrics" {
        return Request::NotFound;
    }
    Request::Metrics {
        head,
        format: Format::from_accept(accept),
    }
}

/// Reads the request head within [`IO_TIMEOUT`]: `Ok(Some(head))`, `Ok(None)` if it is too
/// large, an error if the client is too slow, closes early or the read fails.
fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.truncate(end);
            return Ok(Some(buf));
        }
        if buf.len() > MAX_REQUEST_BYTES {
            return Ok(None);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut chunk) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn handle<F: Fn() -> Snapshot>(mut stream: TcpStream, snapshot: &F) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let req = match read_head(&mut stream)? {
        Some(head) => parse_request(&head),
        None => {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"request too large\n",
                false,
            )
        }
    };
    match req {
        Request::Metrics { head, format } => match encode(&snapshot(), format) {
            Ok(body) => respond(
                &mut stream,
                "200 OK",
                format.content_type(),
                body.as_bytes(),
                head,
            ),
            Err(_) => respond(
                &mut stream,
                "500 Internal Server Error",
                "text/plain",
                b"encoding failed\n",
                false,
            ),
        },
        Request::NotFound => respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            b"not found: try /metrics\n",
            false,
        ),
        Request::BadMethod => respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            b"only GET and HEAD\n",
            false,
        ),
        Request::Bad => respond(
            &mut stream,
            "400 Bad Request",
            "text/plain",
            b"bad request\n",
            false,
        ),
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        body.len(),
        if status.starts_with("405") {
            "Allow: GET, HEAD\r\n"
        } else {
            ""
        }
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    stream.write_all(&out)?;
    stream.flush()?;
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    /// Every family a full snapshot shows (OpenMetrics family names).
    const FAMILIES: &[&str] = &[
        "fivegs_ep_n3_gtp_indatapktn3upf",
        "fivegs_ep_n3_gtp_outdatapktn3upf",
        "scalebricks_packets",
        "scalebricks_fabric_forwarded_packets",
        "scalebricks_host_frames",
        "scalebricks_dropped_packets",
        "scalebricks_malformed_packets",
        "scalebricks_fabric_crossings",
        "scalebricks_gtpu_echo_responses",
        "scalebricks_arp_replies",
        "scalebricks_icmp_errors",
        "scalebricks_gtpu_error_indications",
        "scalebricks_errors_rate_limited",
        "scalebricks_buffered_packets",
        "scalebricks_released_packets",
        "scalebricks_gtpu_end_markers",
        "scalebricks_fragmented_packets",
        "scalebricks_outer_fragments",
        "scalebricks_cp_function_packets",
        "scalebricks_port_bytes",
        "scalebricks_port_dropped_packets",
        "scalebricks_port_errors",
        "scalebricks_port_af_xdp_packets",
        "fivegs_upffunction_upf_sessionnbr",
        "scalebricks_table_entries",
        "scalebricks_table_bytes",
        "scalebricks_gpt_digest_info",
        "scalebricks_update_lag_deltas",
        "scalebricks_owner_applied_seq",
        "scalebricks_resyncs",
        "scalebricks_rib_keys",
        "scalebricks_control_ready",
        "scalebricks_control_epoch",
        "scalebricks_update_queue_length",
        "scalebricks_applied_updates",
        "scalebricks_rejected_updates",
        "scalebricks_control_dropped_datagrams",
        "scalebricks_control_retransmits",
        "scalebricks_log_bytes",
        "scalebricks_memory_bytes",
        "scalebricks_pfcp_messages",
        "scalebricks_pfcp_sessions",
        "fivegs_upffunction_sm_n4sessionestabreq",
        "fivegs_upffunction_sm_n4sessionestabfail",
    ];

    /// Families present without control status, log size or PFCP counts.
    const ALWAYS: usize = 26;

    fn workers() -> Vec<Counters> {
        let mut a = Counters::default();
        a.ports[PortId::Inet as usize].rx = 100;
        a.ports[PortId::Inet as usize].tx = 7;
        a.ports[PortId::Inet as usize].to_fabric = 40;
        a.ports[PortId::Ran as usize].tx = 55;
        a.upstream = 9;
        a.crossings = [30, 20, 4, 1];
        a.echo_replies = 2;
        a.arp_replies = 3;
        a.fragmented = 4;
        a.fragments = 8;
        a.to_cp = 5;
        a.from_cp = 6;
        a.drop(PortId::Ran, Drop::UnknownTeid);
        a.drop(PortId::Ran, Drop::UnknownTeid);
        a.drop(PortId::Inet, Drop::Malformed(WireError::ALL[8]));
        let mut b = a.clone();
        b.ports[PortId::Fabric as usize].rx = 11;
        b.drop(PortId::Fabric, Drop::Host);
        vec![a, b]
    }

    fn full() -> Snapshot {
        let st = PortStats {
            rx_bytes: 1000,
            tx_bytes: 2000,
            rx_dropped: 1,
            rx_truncated: 2,
            tx_dropped: 3,
            rx_errors: 4,
            tx_errors: 5,
            ..PortStats::default()
        };
        let mut pfcp = BTreeMap::new();
        let k = |m: &str, c: &str| PfcpKey {
            message: m.into(),
            cause: c.into(),
        };
        pfcp.insert(k("session_establishment_request", ""), 12);
        pfcp.insert(k("session_establishment_response", "request_accepted"), 9);
        pfcp.insert(
            k("session_establishment_response", "no_resources_available"),
            2,
        );
        pfcp.insert(
            k("session_establishment_response", "mandatory_ie_missing"),
            1,
        );
        pfcp.insert(k("heartbeat_request", ""), 4);
        Snapshot {
            workers: workers(),
            ports: vec![[st; 3], [st; 3]],
            tables: TableSizes {
                gpt_keys: 1_000_000,
                gpt_bytes: 400_000,
                fib_entries: 250_000,
                fib_bytes: 9_000_000,
                uplink_entries: 250_001,
                uplink_bytes: 5_000_000,
            },
            control: Some(json!({
                "node": 1, "epoch": 3, "ready": true, "phase": "serving",
                "gpt_digest": "00ff12ab34cd56ef",
                "owners": [
                    {"owner": 0, "epoch": 3, "applied_seq": 17, "lag": 2, "resyncs": 1, "slice_done": true},
                    {"owner": 1, "epoch": 3, "applied_seq": 5, "lag": 0, "resyncs": 0, "slice_done": true},
                ],
                "own_seq": 5, "rib_keys": 333, "fib_entries": 250000, "queued": 6, "applied": 70,
                "rejected": {"stale": 4, "bad key\"}": 1},
                "dropped": {"bad_checksum": 8},
                "retransmits": 10,
                "memory": {"rib": 4000, "table_rib": 3000, "pfcp": {"sessions": 2000, "packed": 500}},
            })),
            log_bytes: Some(123_456),
            pfcp: Some(pfcp),
            pfcp_sessions: Some(7),
            xdp: None,
        }
    }

    /// The XDP fast path's families, and its finished work folded into the engine's.
    #[test]
    fn xdp_counters_are_exposed_and_folded() {
        let plain = samples(&encode(&full(), Format::Text).unwrap());
        let mut snap = full();
        snap.xdp = Some(XdpReport {
            attached: vec![
                ("inet".into(), "native".into()),
                ("ran".into(), "generic".into()),
            ],
            generic_fallbacks: 1,
            enabled: true,
            write_errors: 0,
            slow_path_af_xdp: vec!["inet".into()],
            counters: vec![
                ("rx_inet".into(), 1000),
                ("to_ran".into(), 300),
                ("to_fabric".into(), 650),
                ("up_to_inet".into(), 40),
                ("fabric_to_ran".into(), 5),
                ("fabric_to_ran_2".into(), 7),
                ("echo".into(), 2),
                ("slow".into(), 50),
            ],
        });
        let om = encode(&snap, Format::OpenMetrics).unwrap();
        let names: Vec<String> = types(&om).into_iter().map(|(n, _)| n).collect();
        for f in [
            "scalebricks_xdp_packets",
            "scalebricks_xdp_attached",
            "scalebricks_xdp_generic_fallbacks",
            "scalebricks_xdp_enabled",
            "scalebricks_xdp_table_write_errors",
        ] {
            assert_eq!(
                names.iter().filter(|n| *n == f).count(),
                1,
                "{f}: {names:?}"
            );
        }
        let s = samples(&encode(&snap, Format::Text).unwrap());
        assert_eq!(
            s[r#"scalebricks_xdp_packets_total{counter="to_ran"}"#],
            "300"
        );
        assert_eq!(s[r#"scalebricks_xdp_packets_total{counter="slow"}"#], "50");
        assert_eq!(
            s[r#"scalebricks_xdp_attached{port="ran",mode="generic"}"#],
            "1"
        );
        assert_eq!(s["scalebricks_xdp_generic_fallbacks_total"], "1");
        assert_eq!(s["scalebricks_xdp_enabled"], "1");
        let n = |m: &HashMap<String, String>, k: &str| m[k].parse::<u64>().unwrap();
        for (k, add) in [
            ("fivegs_ep_n3_gtp_indatapktn3upf_total", 40),
            ("fivegs_ep_n3_gtp_outdatapktn3upf_total", 312),
            ("scalebricks_fabric_crossings_count", 312),
            (r#"scalebricks_fabric_crossings_bucket{le="0.0"}"#, 300),
            (r#"scalebricks_fabric_crossings_bucket{le="1.0"}"#, 305),
            (r#"scalebricks_fabric_crossings_bucket{le="2.0"}"#, 312),
            ("scalebricks_gtpu_echo_responses_total", 2),
        ] {
            assert_eq!(n(&s, k), n(&plain, k) + add, "{k}");
        }
        // The engine's own frame counts stay its own.
        let k = r#"scalebricks_packets_total{port="ran",direction="tx"}"#;
        assert_eq!(s[k], plain[k]);
    }

    /// Samples of an exposition: `name{labels}` -> value, checking every line is a comment or
    /// a sample and no sample repeats.
    fn samples(text: &str) -> HashMap<String, String> {
        let mut m = HashMap::new();
        for l in text.lines() {
            if l.starts_with('#') {
                continue;
            }
            let (k, v) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad line {l:?}"));
            assert!(
                m.insert(k.to_string(), v.to_string()).is_none(),
                "{k} twice"
            );
        }
        m
    }

    fn types(text: &str) -> Vec<(String, String)> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| {
                let (n, t) = l.split_once(' ').unwrap();
                (n.to_string(), t.to_string())
            })
            .collect()
    }

    #[test]
    fn every_family_is_there_once_with_help() {
        let om = encode(&full(), Format::OpenMetrics).unwrap();
        let names: Vec<String> = types(&om).into_iter().map(|(n, _)| n).collect();
        let mut want: Vec<String> = FAMILIES.iter().map(|s| s.to_string()).collect();
        let mut got = names.clone();
        want.sort();
        got.sort();
        assert_eq!(got, want);
        for n in &names {
            let help = om
                .lines()
                .find_map(|l| l.strip_prefix(&format!("# HELP {n} ")))
                .unwrap_or_else(|| panic!("no help for {n}"));
            assert!(
                help.len() > 10 && !help.contains(['\\', '"']),
                "{n}: {help}"
            );
        }
        assert!(om.ends_with("# EOF\n"));
        // Without control status, log size and PFCP counts, those families are absent.
        let bare = Snapshot {
            workers: workers(),
            ..Snapshot::default()
        };
        let om = encode(&bare, Format::OpenMetrics).unwrap();
        let names: Vec<String> = types(&om).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), ALWAYS, "{names:?}");
        assert_eq!(names[..], FAMILIES[..ALWAYS]);
        // No workers at all: still every data-plane family, at zero.
        let empty = encode(&Snapshot::default(), Format::Text).unwrap();
        let s = samples(&empty);
        assert_eq!(s["fivegs_ep_n3_gtp_outdatapktn3upf_total"], "0");
        assert_eq!(s["scalebricks_fabric_crossings_count"], "0");
    }

    #[test]
    fn values_are_the_summed_snapshot() {
        let text = encode(&full(), Format::Text).unwrap();
        let s = samples(&text);
        let want = [
            ("fivegs_ep_n3_gtp_indatapktn3upf_total", "18"),
            ("scalebricks_fragmented_packets_total", "8"),
            ("scalebricks_outer_fragments_total", "16"),
            (
                r#"scalebricks_cp_function_packets_total{direction="to_cp"}"#,
                "10",
            ),
            (
                r#"scalebricks_cp_function_packets_total{direction="from_cp"}"#,
                "12",
            ),
            ("fivegs_ep_n3_gtp_outdatapktn3upf_total", "110"),
            (
                r#"scalebricks_packets_total{port="inet",direction="rx"}"#,
                "200",
            ),
            (
                r#"scalebricks_packets_total{port="inet",direction="tx"}"#,
                "14",
            ),
            (
                r#"scalebricks_packets_total{port="ran",direction="tx"}"#,
                "110",
            ),
            (
                r#"scalebricks_packets_total{port="fabric",direction="rx"}"#,
                "11",
            ),
            (
                r#"scalebricks_packets_total{port="ran",direction="rx"}"#,
                "0",
            ),
            (
                r#"scalebricks_fabric_forwarded_packets_total{port="inet"}"#,
                "80",
            ),
            (
                r#"scalebricks_dropped_packets_total{port="ran",reason="unknown_teid"}"#,
                "4",
            ),
            (r#"scalebricks_host_frames_total{port="fabric"}"#, "1"),
            (
                r#"scalebricks_dropped_packets_total{port="inet",reason="malformed"}"#,
                "2",
            ),
            (
                r#"scalebricks_dropped_packets_total{port="inet",reason="ttl"}"#,
                "0",
            ),
            (
                r#"scalebricks_dropped_packets_total{port="ran",reason="malformed"}"#,
                "0",
            ),
            (
                r#"scalebricks_malformed_packets_total{reason="ipv4_bad_checksum"}"#,
                "2",
            ),
            (
                r#"scalebricks_malformed_packets_total{reason="eth_truncated"}"#,
                "0",
            ),
            (r#"scalebricks_fabric_crossings_bucket{le="0.0"}"#, "60"),
            (r#"scalebricks_fabric_crossings_bucket{le="1.0"}"#, "100"),
            (r#"scalebricks_fabric_crossings_bucket{le="2.0"}"#, "108"),
            (r#"scalebricks_fabric_crossings_bucket{le="+Inf"}"#, "110"),
            ("scalebricks_fabric_crossings_count", "110"),
            ("scalebricks_fabric_crossings_sum", "62.0"),
            ("scalebricks_gtpu_echo_responses_total", "4"),
            ("scalebricks_arp_replies_total", "6"),
            (
                r#"scalebricks_port_bytes_total{port="ran",direction="rx"}"#,
                "2000",
            ),
            (
                r#"scalebricks_port_bytes_total{port="fabric",direction="tx"}"#,
                "4000",
            ),
            (
                r#"scalebricks_port_dropped_packets_total{port="inet",direction="rx"}"#,
                "6",
            ),
            (
                r#"scalebricks_port_dropped_packets_total{port="inet",direction="tx"}"#,
                "6",
            ),
            (
                r#"scalebricks_port_errors_total{port="ran",direction="rx"}"#,
                "8",
            ),
            (
                r#"scalebricks_port_errors_total{port="ran",direction="tx"}"#,
                "10",
            ),
            ("fivegs_upffunction_upf_sessionnbr", "250000"),
            (r#"scalebricks_table_entries{table="gpt"}"#, "1000000"),
            (r#"scalebricks_table_entries{table="uplink"}"#, "250001"),
            (r#"scalebricks_table_bytes{table="fib"}"#, "9000000"),
            (r#"scalebricks_table_bytes{table="gpt"}"#, "400000"),
            (
                r#"scalebricks_gpt_digest_info{digest="00ff12ab34cd56ef"}"#,
                "1",
            ),
            (r#"scalebricks_update_lag_deltas{owner="0"}"#, "2"),
            (r#"scalebricks_update_lag_deltas{owner="1"}"#, "0"),
            (r#"scalebricks_owner_applied_seq{owner="0"}"#, "17"),
            (r#"scalebricks_resyncs_total{owner="0"}"#, "1"),
            ("scalebricks_rib_keys", "333"),
            ("scalebricks_control_ready", "1"),
            ("scalebricks_control_epoch", "3"),
            ("scalebricks_update_queue_length", "6"),
            ("scalebricks_applied_updates_total", "70"),
            (
                r#"scalebricks_rejected_updates_total{outcome="stale"}"#,
                "4",
            ),
            (
                r#"scalebricks_rejected_updates_total{outcome="bad_key__"}"#,
                "1",
            ),
            (
                r#"scalebricks_control_dropped_datagrams_total{reason="bad_checksum"}"#,
                "8",
            ),
            ("scalebricks_control_retransmits_total", "10"),
            ("scalebricks_log_bytes", "123456"),
            (r#"scalebricks_memory_bytes{structure="rib"}"#, "4000"),
            (r#"scalebricks_memory_bytes{structure="table_rib"}"#, "3000"),
            (
                r#"scalebricks_memory_bytes{structure="pfcp_sessions"}"#,
                "2000",
            ),
            (
                r#"scalebricks_memory_bytes{structure="pfcp_packed"}"#,
                "500",
            ),
            (
                r#"scalebricks_pfcp_messages_total{message="session_establishment_request",cause=""}"#,
                "12",
            ),
            ("scalebricks_pfcp_sessions", "7"),
            (
                r#"scalebricks_pfcp_messages_total{message="heartbeat_request",cause=""}"#,
                "4",
            ),
            ("fivegs_upffunction_sm_n4sessionestabreq_total", "12"),
            (
                r#"fivegs_upffunction_sm_n4sessionestabfail_total{cause="no_resources_available"}"#,
                "2",
            ),
            (
                r#"fivegs_upffunction_sm_n4sessionestabfail_total{cause="mandatory_ie_missing"}"#,
                "1",
            ),
        ];
        for (k, v) in want {
            assert_eq!(s.get(k).map(String::as_str), Some(v), "{k} in\n{text}");
        }
        // The named reasons (`host` is not a drop) and `malformed` per port; every parser error.
        let n = |p: &str| s.keys().filter(|k| k.starts_with(p)).count();
        assert_eq!(
            n("scalebricks_dropped_packets_total{"),
            3 * sb_engine::counters::N_DROPS
        );
        assert_eq!(n("scalebricks_malformed_packets_total{"), WireError::COUNT);
        assert_eq!(n("fivegs_upffunction_sm_n4sessionestabfail_total{"), 2);
        // Each port's drops by reason sum to its drops.
        let c = {
            let mut c = Counters::default();
            workers().iter().for_each(|w| c.add(w));
            c
        };
        for p in PortId::ALL {
            let sum: u64 = s
                .iter()
                .filter(|(k, _)| {
                    k.starts_with(&format!(
                        "scalebricks_dropped_packets_total{{port=\"{}\",",
                        p.label()
                    ))
                })
                .map(|(_, v)| v.parse::<u64>().unwrap())
                .sum();
            assert_eq!(sum, c.ports[p as usize].dropped, "{p:?}");
        }
    }

    #[test]
    fn text_format_names_counter_families_by_their_samples() {
        let om = encode(&full(), Format::OpenMetrics).unwrap();
        let text = encode(&full(), Format::Text).unwrap();
        assert_eq!(samples(&om), samples(&text));
        assert!(!text.contains("# EOF"));
        for (n, t) in types(&text) {
            assert_eq!(
                n.ends_with("_total"),
                t == "counter",
                "{n} {t}: a 0.0.4 counter family is named by its samples"
            );
            assert!(text.contains(&format!("# HELP {n} ")), "{n}");
        }
        for (n, t) in types(&om) {
            assert!(!n.ends_with("_total"), "{n} {t}");
        }
    }

    #[test]
    fn control_status_variants_and_junk() {
        // `lag` as a map or an array, top-level `resyncs`, a number as digest.
        let one = |st: Value| {
            let s = Snapshot {
                control: Some(st),
                ..Snapshot::default()
            };
            samples(&encode(&s, Format::Text).unwrap())
        };
        let s = one(json!({"lag": {"2": 5, "x y": 1}, "resyncs": 4, "gpt_digest": 77}));
        assert_eq!(s[r#"scalebricks_update_lag_deltas{owner="2"}"#], "5");
        assert_eq!(s[r#"scalebricks_update_lag_deltas{owner="x_y"}"#], "1");
        assert_eq!(s["scalebricks_resyncs_total"], "4");
        assert_eq!(s[r#"scalebricks_gpt_digest_info{digest="77"}"#], "1");
        let s = one(json!({"lag": [3, 0, "no"]}));
        assert_eq!(s[r#"scalebricks_update_lag_deltas{owner="1"}"#], "0");
        assert_eq!(s.keys().filter(|k| k.contains("lag")).count(), 2);
        // Owners without an `owner` field are named by position.
        let s = one(json!({"owners": [{"lag": 1}, {"lag": 2}]}));
        assert_eq!(s[r#"scalebricks_update_lag_deltas{owner="1"}"#], "2");
        // Wrong types, negatives, nulls, huge numbers and long or hostile names never panic
        // and never break the exposition's syntax.
        let long = "\"\n\\}".repeat(100);
        for st in [
            json!(null),
            json!([1, 2]),
            json!("x"),
            json!({"gpt_digest": null, "owners": 5, "lag": "x", "resyncs": -1, "rib_keys": 1.5e300}),
            json!({"owners": [null, 3, {"owner": {"a": 1}, "lag": u64::MAX}], "ready": "yes"}),
            json!({"rejected": {long.clone(): 1}, "dropped": [1], "gpt_digest": long}),
        ] {
            let text = encode(
                &Snapshot {
                    control: Some(st.clone()),
                    ..Snapshot::default()
                },
                Format::Text,
            )
            .unwrap();
            for l in text.lines().filter(|l| !l.starts_with('#')) {
                let (k, v) = l.rsplit_once(' ').unwrap();
                assert!(v.parse::<f64>().is_ok(), "{st}: {l}");
                assert!(!k.contains('\\') && k.matches('"').count() % 2 == 0, "{l}");
                assert!(k.len() < 200, "{l}");
            }
        }
    }

    #[test]
    fn accept_header_picks_the_format() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::from_accept(Some(prom)), Format::OpenMetrics);
        assert_eq!(
            Format::from_accept(Some("Application/OpenMetrics-Text")),
            Format::OpenMetrics
        );
        assert_eq!(Format::from_accept(None), Format::Text);
        assert_eq!(Format::from_accept(Some("*/*")), Format::Text);
        assert_eq!(Format::from_accept(Some("text/plain")), Format::Text);
        assert_eq!(
            Format::from_accept(Some("application/openmetrics-text;q=0")),
            Format::Text
        );
    }

    #[test]
    fn request_parsing() {
        let p = |s: &str| parse_request(s.as_bytes());
        assert_eq!(
            p("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text"),
            Request::Metrics {
                head: false,
                format: Format::OpenMetrics
            }
        );
        assert_eq!(
            p("HEAD /metrics?x=1 HTTP/1.0"),
            Request::Metrics {
                head: true,
                format: Format::Text
            }
        );
        assert_eq!(p("GET / HTTP/1.1"), Request::NotFound);
        assert_eq!(p("GET /metricsx HTTP/1.1"), Request::NotFound);
        assert_eq!(p("POST /metrics HTTP/1.1"), Request::BadMethod);
        assert_eq!(p("GET /metrics HTTP/2.0"), Request::Bad);
        assert_eq!(p("GET /metrics"), Request::Bad);
        assert_eq!(p("GET  /metrics HTTP/1.1"), Request::Bad);
        assert_eq!(p("GET /metrics HTTP/1.1\r\nno colon"), Request::Bad);
        assert_eq!(p(""), Request::Bad);
        assert_eq!(
            parse_request(b"GET /metrics HTTP/1.1\r\nA: \xff"),
            Request::Bad
        );
    }

    proptest::proptest! {
        #[test]
        fn parse_request_never_panics(b in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            fuzz_input(&b);
        }

        #[test]
        fn from_accept_never_panics(s in ".{0,200}") {
            let _ = Format::from_accept(Some(&s));
        }
    }
}
