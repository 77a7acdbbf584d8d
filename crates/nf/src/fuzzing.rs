//! Entry points of the cargo-fuzz targets (`fuzz/fuzz_targets/nf_*.rs`); the crate's tests run
//! them on random and mutated frames on stable too.
//!
//! Each takes any bytes as a frame on both sides of its NF (the inside path, and the outside
//! path with a value made from the frame's first bytes): nothing panics, and a frame that
//! parsed with right IPv4 and L4 checksums leaves, if it leaves, with right checksums.

use crate::firewall::Firewall;
use crate::lb::{Backend, Lb, Vip};
use crate::nat::{Nat, NatConfig};
use crate::vpn::{parse_vxlan, Tunnel, Vpn, VpnConfig};
use crate::{flow, lb};
use sb_engine::App;
use sb_io::PacketBatch;
use sb_wire::{parse_frame_with, ParseOptions};
use std::net::Ipv4Addr;

/// True if `frame` parses with its IPv4 header checksum and its TCP/UDP/ICMP checksum right
/// (a UDP checksum of 0: none).
pub fn checksums_ok(frame: &[u8]) -> bool {
    let o = ParseOptions {
        verify_l4_checksum: true,
        ..flow::OPTIONS
    };
    parse_frame_with(frame, &o).is_ok()
}

/// `data` as frame 0 of a batch (`None` if it does not fit a buffer).
fn batch_of(data: &[u8]) -> Option<PacketBatch> {
    let mut b = PacketBatch::new(1);
    (data.len() <= b.max_frame() && b.push(data)).then_some(b)
}

/// Runs `app`'s inside path on `data`, and its outside path with `value` (after
/// `downstream_key`, then again with a metadata word taken from the data); checks that a frame
/// whose checksums were right leaves with right checksums.
fn both_sides<A: App>(app: &mut A, data: &[u8], value: &[u8]) {
    let ok_before = checksums_ok(data);
    if let Some(mut b) = batch_of(data) {
        if app.access(&mut b, 0).is_ok() && ok_before {
            assert!(checksums_ok(b.get(0)), "inside path broke a checksum");
        }
    }
    if let Some(mut b) = batch_of(data) {
        let mut key = vec![0u8; app.key_bytes()];
        if app.downstream_key(data, &mut key, b.meta_mut(0)).is_ok() {
            let _ = app.egress_node(value);
            if app.apply(&mut b, 0, value).is_ok() && ok_before {
                assert!(checksums_ok(b.get(0)), "outside path broke a checksum");
            }
        }
    }
    // A metadata word that did not come from `downstream_key`: no panic, whatever it says.
    if let (Some(mut b), Some(w)) = (batch_of(data), data.get(..4)) {
        b.meta_mut(0).user = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        let _ = app.apply(&mut b, 0, value);
    }
}

/// The first `n` bytes of `data`, zero-padded.
fn value_from(data: &[u8], n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    let k = n.min(data.len());
    v[..k].copy_from_slice(&data[..k]);
    v
}

/// The NAT (a range of four public ports, so running out is reached).
pub fn nat(data: &[u8]) {
    let _ = flow::parse(data);
    let cfg = NatConfig {
        public: Ipv4Addr::new(198, 51, 100, 1),
        ports: 1000..=1003,
        node: 0,
    };
    let mut n = Nat::new(cfg).expect("a range of four ports");
    both_sides(&mut n, data, &value_from(data, crate::nat::VALUE_BYTES));
    // Whatever mapping the inside path made answers the reversed key.
    for u in n.take_updates() {
        if let crate::Update::Insert(k, v) = u {
            assert_eq!(n.table().inbound(&k).map(|t| t.value()), Some(v));
        }
    }
}

/// The stateful firewall.
pub fn firewall(data: &[u8]) {
    let mut f = Firewall::new(1);
    both_sides(
        &mut f,
        data,
        &value_from(data, crate::firewall::VALUE_BYTES),
    );
    let _ = f.take_updates();
}

/// The load balancer (the frame's own source made a backend, so the return path is reached),
/// and a Maglev pick for its key.
pub fn lb(data: &[u8]) {
    let mut l = Lb::new();
    if let Ok(p) = flow::parse(data) {
        let b = Backend {
            addr: p.src,
            port: p.src_port,
            node: 0,
        };
        let vip = Vip {
            protocol: p.proto.number(),
            addr: Ipv4Addr::new(192, 0, 2, 80),
            port: 80,
        };
        l.add_service(vip, &[b]);
        let t = lb::Maglev::new(&[b], 13).expect("13 is a prime");
        assert_eq!(t.pick(&p.key()), Some(b));
    }
    both_sides(&mut l, data, &value_from(data, lb::VALUE_BYTES));
}

/// The VPN gateway (a tunnel made from the frame itself, so the return path is reached).
pub fn vpn(data: &[u8]) {
    let mut v = Vpn::new(VpnConfig {
        external: Ipv4Addr::new(198, 51, 100, 2),
        internal: Ipv4Addr::new(10, 255, 0, 1),
    });
    if let Ok(x) = parse_vxlan(data) {
        v.add_tunnel(&Tunnel {
            customer_vni: x.vni ^ 1,
            customer_peer: Ipv4Addr::new(203, 0, 113, 7),
            vm: x.inner_src,
            server: Ipv4Addr::new(10, 1, 0, 1),
            internal_vni: x.vni,
            node: 0,
        });
    }
    both_sides(&mut v, data, &value_from(data, crate::vpn::VALUE_BYTES));
}
