//! The entry point the cargo-fuzz target (`fuzz/`, target `engine_frames`) and the
//! random-frames property test share: arbitrary bytes as frames on any port of any node of a
//! small cluster of each architecture, raw or behind a valid fabric shim.

use crate::cluster::{generate_tunnels, sim_mac, SimCluster};
use crate::{fabric, Arch, PortId};
use std::sync::{Mutex, OnceLock};

fn clusters() -> &'static [Mutex<SimCluster>; 3] {
    static C: OnceLock<[Mutex<SimCluster>; 3]> = OnceLock::new();
    C.get_or_init(|| {
        let tunnels = generate_tunnels(64, 4, 9, 3);
        Arch::ALL.map(|a| Mutex::new(SimCluster::new(a, &tunnels, 4, 9, 8).expect("small cluster")))
    })
}

/// Feeds `data` to the engines: byte 0 picks the architecture, node and port, byte 1 whether
/// (and how) to wrap the rest in a fabric shim; the rest is the frame. Checks that every frame
/// received, and every error message the engines made, was transmitted once, counted as
/// dropped, or left to the host.
pub fn run_frames(data: &[u8]) {
    let (Some(&sel), Some(&wrap)) = (data.first(), data.get(1)) else {
        return;
    };
    let frame = &data[2..];
    let arch = usize::from(sel % 3);
    let node = u16::from((sel / 3) % 4);
    let port = PortId::ALL[usize::from(sel / 12) % 3];
    let mut c = clusters()[arch].lock().unwrap_or_else(|e| e.into_inner());
    let bytes = if wrap & 1 == 1 && frame.len() >= 14 {
        let mut buf = vec![0u8; fabric::SHIM_LEN];
        buf.extend_from_slice(frame);
        let kind = if wrap & 2 == 0 {
            fabric::Kind::Lookup
        } else {
            fabric::Kind::Transmit
        };
        let shim = fabric::Shim {
            kind,
            hops: (wrap >> 2) & 3,
            ingress: u16::from(wrap >> 4),
        };
        let to = sim_mac(PortId::Fabric, node, false);
        let from = sim_mac(PortId::Fabric, (node + 1) % 4, false);
        match fabric::push(&mut buf, fabric::SHIM_LEN, frame.len(), to, from, shim) {
            Some(s) => buf[s..].to_vec(),
            None => return,
        }
    } else {
        frame.to_vec()
    };
    if bytes.len() > 1900 {
        return;
    }
    c.inject(node, port, &[bytes]);
    let cn = c.counters();
    let rx: u64 = cn.ports.iter().map(|p| p.rx).sum();
    let tx: u64 = cn.ports.iter().map(|p| p.tx).sum();
    let dropped: u64 = cn.ports.iter().map(|p| p.dropped).sum();
    // Plain IP/ARP on the fabric is the nodes' kernels' traffic: counted as `host`.
    let host: u64 = cn.ports.iter().map(|p| p.host).sum();
    // The error messages the engines made (an ICMP error about a dropped packet, a GTP-U
    // Error Indication for an unknown TEID) are frames too: each leaves or is dropped.
    // A packet cut into outer fragments leaves as more frames than it was.
    let made =
        cn.icmp_errors + cn.error_indications + cn.end_markers + (cn.fragments - cn.fragmented);
    // Buffered frames leave later, released into the downstream path (not received again).
    assert_eq!(
        rx + made + cn.released,
        tx + dropped + host + cn.buffered + cn.to_cp,
        "every frame received or made leaves once, is counted as dropped, or is left to the host"
    );
    // Keep memory bounded over a long fuzzing run.
    let c = &mut *c;
    for v in c.ran_out.iter_mut().chain(c.inet_out.iter_mut()) {
        v.clear();
    }
}
