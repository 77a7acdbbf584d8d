//! The generator loop: picks a flow and a size per packet, stamps it, and sends batches on one
//! port per target node at a set rate (a token bucket whose depth is one batch) or as fast as
//! the ports take them. Generic over [`sb_io::Port`], so tests run it on in-memory ports.

use std::io::Write;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};

use rand::SeedableRng;
use sb_io::{PacketBatch, Port};
use serde::Serialize;

use crate::clock::{monotonic_ns, realtime_ns};
use crate::dist::{FlowDist, SizeSpec};
use crate::frame::{build_frame, FrameTemplate};
use crate::pcap::PcapWriter;
use crate::stamp::{Stamp, TOTAL_UNKNOWN};
use crate::TrafficError;

/// What to send.
#[derive(Clone, Debug)]
pub struct GenConfig {
    /// UE addresses; the flow index is the position here.
    pub flows: Vec<Ipv4Addr>,
    /// Which flow each packet belongs to.
    pub dist: FlowDist,
    /// Frame sizes.
    pub size: SizeSpec,
    /// Packets per second over all targets; 0 = as fast as possible.
    pub rate: f64,
    /// Packets in total (spread round-robin over the targets).
    pub count: u64,
    /// Frames per batch (and the token bucket's depth).
    pub batch: usize,
    /// Random seed (flow choice).
    pub seed: u64,
    /// Stream id base: the stream of target node `n` is `run_id & !0xff | n`.
    pub run_id: u32,
}

/// One target node: its frame template and (unless only writing a pcap) its port.
pub struct Target<'a> {
    /// Node index (the low byte of its stream id).
    pub node: usize,
    /// Addresses of its frames.
    pub template: FrameTemplate,
    /// Where to send; `None` to only write the pcap.
    pub port: Option<&'a mut dyn Port>,
}

/// What the generator did, printed as JSON by `scalebricks gen`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GenReport {
    /// Frames accepted by the ports (or written to the pcap when there are no ports).
    pub sent: u64,
    /// Frames the ports could not take.
    pub tx_dropped: u64,
    /// Wall time of the sending loop.
    pub seconds: f64,
    /// `sent / seconds`.
    pub pps: f64,
    /// Bytes sent (frames, no FCS).
    pub bytes: u64,
    /// Frames per target node, in target order.
    pub per_target: Vec<u64>,
    /// Stream id of each target, in target order.
    pub streams: Vec<u32>,
}

/// Stream id of target node `node` in run `run_id`.
pub fn stream_id(run_id: u32, node: usize) -> u32 {
    (run_id & !0xff) | (node as u32 & 0xff)
}

/// Runs the generator to completion (or until `stop`). Frames go to `targets` round-robin;
/// every frame is also written to `pcap` if given.
pub fn run_gen<W: Write>(
    cfg: &GenConfig,
    targets: &mut [Target<'_>],
    mut pcap: Option<&mut PcapWriter<W>>,
    stop: &AtomicBool,
) -> Result<GenReport, TrafficError> {
    if targets.is_empty() || cfg.flows.is_empty() {
        return Err(TrafficError::Build("no targets or no flows".into()));
    }
    let nt = targets.len() as u64;
    let batch = cfg.batch.max(1);
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let mut batches: Vec<PacketBatch> = targets.iter().map(|_| PacketBatch::new(batch)).collect();
    let totals: Vec<u32> = (0..nt)
        .map(|t| {
            let n = cfg.count / nt + u64::from(t < cfg.count % nt);
            u32::try_from(n).unwrap_or(TOTAL_UNKNOWN)
        })
        .collect();
    let mut seqs = vec![0u64; targets.len()];
    let mut report = GenReport {
        per_target: vec![0; targets.len()],
        streams: targets
            .iter()
            .map(|t| stream_id(cfg.run_id, t.node))
            .collect(),
        ..Default::default()
    };
    let (mono0, real0) = (monotonic_ns(), realtime_ns());
    let mut i = 0u64;
    while i < cfg.count && !stop.load(Ordering::Relaxed) {
        // How many packets the schedule allows now (token bucket of depth `batch`).
        let now = monotonic_ns();
        let n = if cfg.rate > 0.0 {
            let due = ((now - mono0) as f64 * cfg.rate / 1e9) as u64 + 1;
            let allowed = due.saturating_sub(i).min(batch as u64);
            if allowed == 0 {
                let next_ns = mono0 + ((i as f64) * 1e9 / cfg.rate) as u64;
                let wait = next_ns.saturating_sub(now);
                if wait > 60_000 {
                    std::thread::sleep(std::time::Duration::from_nanos(wait - 50_000));
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            allowed
        } else {
            batch as u64
        };
        let n = n.min(cfg.count - i);
        let send_ns = monotonic_ns();
        for _ in 0..n {
            let t = (i % nt) as usize;
            let flow = cfg.dist.sample(&mut rng);
            let size = cfg.size.size(i, targets[t].template.proto.min_frame());
            let stamp = Stamp {
                stream: report.streams[t],
                seq: seqs[t],
                send_ns,
                flow: flow as u32,
                total: totals[t],
            };
            seqs[t] += 1;
            let buf = batches[t].alloc(size).ok_or_else(|| {
                TrafficError::Build(format!("frame of {size} bytes does not fit a batch buffer"))
            })?;
            build_frame(&targets[t].template, buf, cfg.flows[flow], &stamp)?;
            if let Some(w) = pcap.as_deref_mut() {
                w.write_frame(real0 + (send_ns - mono0), buf)
                    .map_err(|e| TrafficError::Io(format!("pcap: {e}")))?;
            }
            report.bytes += size as u64;
            i += 1;
            if batches[t].is_full() {
                flush(&mut targets[t], &mut batches[t], t, &mut report);
            }
        }
        for (t, b) in batches.iter_mut().enumerate() {
            if !b.is_empty() {
                flush(&mut targets[t], b, t, &mut report);
            }
        }
    }
    report.seconds = (monotonic_ns() - mono0) as f64 / 1e9;
    report.pps = if report.seconds > 0.0 {
        report.sent as f64 / report.seconds
    } else {
        0.0
    };
    Ok(report)
}

fn flush(target: &mut Target<'_>, b: &mut PacketBatch, t: usize, report: &mut GenReport) {
    let len = b.len() as u64;
    let sent = match target.port.as_deref_mut() {
        Some(p) => p.tx_batch(b) as u64,
        None => {
            b.clear();
            len
        }
    };
    report.sent += sent;
    report.per_target[t] += sent;
    report.tx_dropped += len - sent;
}
