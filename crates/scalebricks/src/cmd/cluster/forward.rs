//! The plain per-node forwarder `up` starts when forwarding is `user`: it receives frames on the
//! node's `inet` port, parses each with sb-wire, drops and counts malformed ones (truncated
//! headers, bad lengths, bad checksums, bad GTP-U flags) and anything that is not IP, rewrites
//! the MACs of the rest (`ran` port -> RAN-side namespace) and transmits them on `ran`. Its
//! counters go to `forward-nodeI.json` in the state directory, rewritten every second and on
//! SIGTERM/SIGINT, after which it exits.
#![allow(unsafe_code)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use sb_io::afpacket::{AfPacketConfig, AfPacketPort};
use sb_io::{PacketBatch, Port, PortStats};
use sb_wire::{FrameKind, WireError};
use serde_json::json;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn install_handlers() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    }
}

/// Counters of one forwarder.
#[derive(Default)]
struct Counters {
    rx: u64,
    forwarded: u64,
    malformed: u64,
    by_reason: [u64; WireError::COUNT],
    not_ip: u64,
}

/// What the forwarder does with one frame: `Some` new MACs to forward, `None` to drop.
fn classify(frame: &[u8], c: &mut Counters) -> bool {
    match sb_wire::parse_frame(frame) {
        Err(e) => {
            c.malformed += 1;
            c.by_reason[e.index()] += 1;
            false
        }
        Ok(p) => match p.kind {
            FrameKind::Ip(_) | FrameKind::Gtpu(_) => true,
            FrameKind::Arp(_) | FrameKind::Other(_) => {
                c.not_ip += 1;
                false
            }
        },
    }
}

fn port_json(s: &PortStats) -> serde_json::Value {
    json!({
        "rx_packets": s.rx_packets, "rx_bytes": s.rx_bytes, "rx_dropped": s.rx_dropped,
        "rx_errors": s.rx_errors, "tx_packets": s.tx_packets, "tx_bytes": s.tx_bytes,
        "tx_dropped": s.tx_dropped, "tx_errors": s.tx_errors,
        "rx_truncated": s.rx_truncated, "rx_csum_completed": s.rx_csum_completed,
    })
}

fn write_stats(
    path: &Path,
    node: usize,
    c: &Counters,
    inet: &dyn Port,
    ran: &dyn Port,
    running: bool,
) -> anyhow::Result<()> {
    let reasons: serde_json::Map<String, serde_json::Value> = WireError::ALL
        .iter()
        .filter(|e| c.by_reason[e.index()] > 0)
        .map(|e| (e.label().to_string(), c.by_reason[e.index()].into()))
        .collect();
    let v = json!({
        "node": node,
        "pid": std::process::id(),
        "running": running,
        "rx": c.rx,
        "forwarded": c.forwarded,
        "malformed": c.malformed,
        "malformed_by_reason": reasons,
        "not_ip": c.not_ip,
        "tx_dropped": ran.stats().tx_dropped,
        "inet": port_json(&inet.stats()),
        "ran": port_json(&ran.stats()),
    });
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&v)?)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

pub fn run(dir: &Path, node: usize) -> anyhow::Result<()> {
    install_handlers();
    let d = super::load_cluster(dir)?;
    let n = d.node(node)?.clone();
    // A deep receive ring (128 blocks of 64 KiB): at low rates the kernel retires a block per
    // millisecond, so 16 blocks would overflow after ~16 ms without the CPU on a busy machine.
    let rx_cfg = AfPacketConfig {
        block_size: 1 << 16,
        block_count: 128,
        ..AfPacketConfig::default()
    };
    let tx_cfg = AfPacketConfig {
        tx_only: true,
        ..AfPacketConfig::default()
    };
    let (mut inet, mut ran) = sb_io::netns::in_netns(&n.netns, || {
        Ok::<_, sb_io::IoError>((
            AfPacketPort::open(&n.inet.local.name, &rx_cfg)?,
            AfPacketPort::open(&n.ran.local.name, &tx_cfg)?,
        ))
    })
    .with_context(|| format!("entering {}", n.netns))?
    .with_context(|| format!("opening inet/ran in {}", n.netns))?;
    let (src, dst) = (n.ran.local.mac.0, n.ran.peer.mac.0);
    let stats_path = sb_topology::forwarder_stats_path(dir, node);
    let mut c = Counters::default();
    // Being ready means the stats file exists (`cluster up` waits for it).
    write_stats(&stats_path, node, &c, &inet, &ran, true)?;
    eprintln!("forwarder node {node}: {}/inet -> ran", n.netns);
    let mut batch = PacketBatch::new(64);
    let mut last = Instant::now();
    while !STOP.load(Ordering::Relaxed) {
        let _ = inet.wait_rx(Duration::from_millis(100));
        loop {
            batch.clear();
            let got = inet.rx_batch(&mut batch);
            if got == 0 {
                break;
            }
            c.rx += got as u64;
            batch.retain(|f| classify(f, &mut c));
            for i in 0..batch.len() {
                let f = batch.get_mut(i);
                f[0..6].copy_from_slice(&dst);
                f[6..12].copy_from_slice(&src);
            }
            c.forwarded += ran.tx_batch(&mut batch) as u64;
        }
        if last.elapsed() >= Duration::from_secs(1) {
            write_stats(&stats_path, node, &c, &inet, &ran, true)?;
            last = Instant::now();
        }
    }
    write_stats(&stats_path, node, &c, &inet, &ran, false)?;
    eprintln!(
        "forwarder node {node}: stopped, {} forwarded, {} malformed",
        c.forwarded, c.malformed
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_frames_are_counted_not_forwarded() {
        let mut c = Counters::default();
        // Truncated Ethernet.
        assert!(!classify(&[0u8; 10], &mut c));
        // IPv4 with a total length beyond the frame.
        let mut f = vec![0u8; 60];
        f[12] = 0x08;
        f[14] = 0x45;
        f[16] = 0xff;
        assert!(!classify(&f, &mut c));
        assert_eq!(c.malformed, 2);
        assert_eq!(c.by_reason.iter().sum::<u64>(), 2);
        // ARP-less other ethertype: dropped but not malformed.
        let mut o = vec![0u8; 60];
        o[12] = 0x88;
        o[13] = 0xcc;
        assert!(!classify(&o, &mut c));
        assert_eq!((c.malformed, c.not_ip), (2, 1));
    }
}
