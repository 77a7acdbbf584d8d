//! A cluster's tables, planned in memory: the tunnels, which node's FIB holds which of them
//! under each architecture, the GPT, and a deterministic in-process cluster ([`SimCluster`])
//! that runs N engines joined by an ideal fabric (tests, `bench node`).

use crate::engine::{indirection_node, Arch, Engine, NodeConfig, Outputs, PortAddr};
use crate::fib::{CuckooFib, Fib, FibError};
use crate::lte::{Lte, LteConfig, Tunnel, KEY_BYTES, VALUE_BYTES};
use crate::PortId;
use sb_common::hash128;
use sb_packet::PacketBatch;
use sb_setsep::{BuildOptions, Config, SetSep};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Bits of GPT value a cluster of `nodes` needs (at least 1).
pub fn value_bits(nodes: usize) -> u8 {
    (usize::BITS - nodes.saturating_sub(1).leading_zeros()).max(1) as u8
}

/// `count` tunnels with distinct UE addresses and distinct TEIDs, spread uniformly over
/// `nodes` nodes: UE addresses from 100.64.0.0/10 (every `v6_every`-th one an IPv6 address
/// from 2001:db8::/32 instead, 0 for none), eNodeBs 192.0.2.1-254 ... reproducible from `seed`.
pub fn generate_tunnels(count: usize, nodes: usize, seed: u64, v6_every: usize) -> Vec<Tunnel> {
    generate_tunnels_in(
        Ipv4Addr::new(100, 64, 0, 0),
        10,
        count,
        nodes,
        seed,
        v6_every,
    )
}

/// [`generate_tunnels`] with the IPv4 UE addresses drawn from `pool`/`prefix_len` (at most
/// half of the pool is used: `count` must leave room, or the IPv6 share must be larger).
///
/// Addresses and TEIDs are distinct by construction (a seeded bijection of a counter, no set of
/// what was drawn), so 32M tunnels take seconds.
///
/// # Panics
/// If the pool cannot hold the IPv4 share of `count` addresses twice over.
pub fn generate_tunnels_in(
    pool: Ipv4Addr,
    prefix_len: u8,
    count: usize,
    nodes: usize,
    seed: u64,
    v6_every: usize,
) -> Vec<Tunnel> {
    let host_bits = 32 - u32::from(prefix_len.min(32));
    let host_mask: u64 = if host_bits == 32 {
        u64::from(u32::MAX)
    } else {
        (1u64 << host_bits) - 1
    };
    let v4_count = count - count.checked_div(v6_every).unwrap_or(0);
    assert!(
        (v4_count as u64) * 2 <= host_mask + 1,
        "a /{prefix_len} pool is too small for {v4_count} UE addresses"
    );
    let net = u32::from(pool) & !(host_mask as u32);
    let mix = |x: u64| {
        sb_common::splitmix64_mix(x.wrapping_add(seed.wrapping_mul(sb_common::SPLITMIX64_GAMMA)))
    };
    // A bijection of the host bits: multiply by an odd constant and add, modulo 2^host_bits.
    let (mul, add) = ((mix(1) | 1) & host_mask, mix(2) & host_mask);
    let host = |i: u64| (i.wrapping_mul(mul).wrapping_add(add)) & host_mask;
    // TEIDs: a bijection of u32 (odd multiplier), 0 skipped.
    let (tmul, tadd) = ((mix(3) as u32) | 1, mix(4) as u32);
    let mut out = Vec::with_capacity(count);
    let (mut next_v4, mut next_v6, mut next_teid) = (0u64, 0u64, 0u32);
    while out.len() < count {
        let i = out.len();
        let ue = if v6_every > 0 && i % v6_every == v6_every - 1 {
            let r = mix(1 << 40 | next_v6);
            next_v6 += 1;
            // Distinct /64s (an IPv6 UE's key, `lte::ue_key`): the counter sits in the prefix
            // (2^32 of them in 2001:db8::/32), the interface identifier is decoration.
            IpAddr::V6(Ipv6Addr::new(
                0x2001,
                0xdb8,
                (next_v6 >> 16) as u16,
                next_v6 as u16,
                (r >> 48) as u16,
                (r >> 32) as u16,
                (r >> 16) as u16,
                r as u16 | 1,
            ))
        } else {
            loop {
                let a = net | host(next_v4) as u32;
                next_v4 += 1;
                // Avoid .0 and .255 in the last octet (when the pool is that wide).
                if host_bits < 8 || !matches!(a & 0xff, 0 | 255) {
                    break IpAddr::V4(Ipv4Addr::from(a));
                }
            }
        };
        let teid = loop {
            let t = next_teid.wrapping_mul(tmul).wrapping_add(tadd);
            next_teid += 1;
            if t != 0 {
                break t;
            }
        };
        let n = mix(1 << 50 | i as u64);
        out.push(Tunnel {
            ue,
            teid,
            enb: Ipv4Addr::new(192, 0, 2, 1 + (n % 254) as u8),
            node: ((n >> 8) % nodes as u64) as u16,
            qci: 1 + ((n >> 16) % 9) as u8,
            ul_teid: 0,
            qfi: 0,
            rqi: false,
            policy: crate::lte::Policy::default(),
            owner: 0,
        });
    }
    out
}

/// Which tunnels (indices into `tunnels`) node `node`'s FIB holds under `arch`: its own
/// (ScaleBricks), all (full duplication), or those whose key hashes to it (hash partitioning).
pub fn fib_slice(arch: Arch, tunnels: &[Tunnel], node: u16, nodes: u16, seed: u64) -> Vec<usize> {
    (0..tunnels.len())
        .filter(|&i| {
            let t = &tunnels[i];
            match arch {
                Arch::ScaleBricks => t.node == node,
                Arch::FullDup => true,
                Arch::HashPart => indirection_node(hash128(&t.key(), seed), nodes) == node,
            }
        })
        .collect()
}

/// The GPT of `tunnels`: UE key -> handling node, 16+8, `threads` build threads (0: all).
pub fn build_gpt(
    tunnels: &[Tunnel],
    nodes: usize,
    seed: u64,
    threads: usize,
) -> Result<SetSep, sb_setsep::BuildError> {
    let keys: Vec<[u8; 16]> = tunnels.iter().map(Tunnel::key).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let values: Vec<u16> = tunnels.iter().map(|t| t.node).collect();
    let opts = BuildOptions {
        config: Config::C16_8,
        value_bits: value_bits(nodes),
        threads,
        seed,
        ..BuildOptions::default()
    };
    SetSep::build(&refs, &values, &opts)
}

/// The FIB of node `node` with our cuckoo table.
pub fn build_cuckoo_fib(
    arch: Arch,
    tunnels: &[Tunnel],
    node: u16,
    nodes: u16,
    seed: u64,
) -> Result<CuckooFib, FibError> {
    build_cuckoo_fib_with(arch, tunnels, node, nodes, seed, Tunnel::value)
}

/// [`build_cuckoo_fib`] with each tunnel's value made by `value` (one with a local policy
/// slot, for one).
pub fn build_cuckoo_fib_with(
    arch: Arch,
    tunnels: &[Tunnel],
    node: u16,
    nodes: u16,
    seed: u64,
    mut value: impl FnMut(&Tunnel) -> [u8; VALUE_BYTES],
) -> Result<CuckooFib, FibError> {
    let slice = fib_slice(arch, tunnels, node, nodes, seed);
    let entries: Vec<([u8; KEY_BYTES], [u8; VALUE_BYTES])> = slice
        .iter()
        .map(|&i| (tunnels[i].key(), value(&tunnels[i])))
        .collect();
    let (_w, fib) = CuckooFib::build(
        KEY_BYTES,
        VALUE_BYTES,
        seed,
        entries.iter().map(|(k, v)| (&k[..], &v[..])),
    )?;
    Ok(fib)
}

/// MAC of node `node`'s port `port` in simulated clusters: `02:5b:<port>:00:<node>`.
pub fn sim_mac(port: PortId, node: u16, peer: bool) -> [u8; 6] {
    let [h, l] = node.to_be_bytes();
    [0x02, 0x5b, port as u8, u8::from(peer), h, l]
}

/// The `ran` (S1-U) address of node `node` in simulated clusters: `10.1.{node}.1`.
pub fn sim_ran_addr(node: u16) -> Ipv4Addr {
    Ipv4Addr::new(10, 1 + (node >> 8) as u8, node as u8, 1)
}

/// A downstream frame as node `ingress`'s Internet neighbour sends it in a simulated cluster:
/// UDP 443 -> 5000 from a server (203.0.113.1 or 2001:db8:ffff::1) to `ue`, with `ttl` and
/// `payload`.
pub fn sim_downstream_frame(ue: IpAddr, ingress: u16, ttl: u8, payload: &[u8]) -> Vec<u8> {
    let server: IpAddr = match ue {
        IpAddr::V4(_) => Ipv4Addr::new(203, 0, 113, 1).into(),
        IpAddr::V6(_) => Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1).into(),
    };
    let b = sb_wire::PacketBuilder {
        ttl,
        ..sb_wire::PacketBuilder::udp(
            sb_wire::EthernetAddress(sim_mac(PortId::Inet, ingress, true)),
            sb_wire::EthernetAddress(sim_mac(PortId::Inet, ingress, false)),
            server,
            ue,
            443,
            5000,
        )
    };
    let mut out = vec![0u8; b.header_len() + payload.len()];
    let n = b
        .build(payload, &mut out)
        .expect("the buffer fits the frame");
    out.truncate(n);
    out
}

/// Node `node`'s engine in a simulated cluster of `nodes` (MACs from [`sim_mac`], S1-U
/// addresses from [`sim_ran_addr`], ARP answered for `10.0.{node}.1` and the S1-U address),
/// running `arch` over `gpt` and `fib`, with `uplink` as its LTE uplink table.
#[allow(clippy::too_many_arguments)]
pub fn sim_engine(
    arch: Arch,
    node: u16,
    nodes: u16,
    seed: u64,
    gpt: Option<crate::Gpt>,
    fib: Box<dyn Fib>,
    uplink: sb_cuckoo::Reader,
    batch: usize,
) -> Result<Engine<Lte>, crate::EngineError> {
    let port = |p: PortId, ip: Ipv4Addr| PortAddr {
        mac: sim_mac(p, node, false),
        peer_mac: sim_mac(p, node, true),
        ip: Some(ip),
    };
    let cfg = NodeConfig {
        arch,
        node,
        fabric_macs: (0..nodes)
            .map(|n| sim_mac(PortId::Fabric, n, false))
            .collect(),
        inet: port(PortId::Inet, Ipv4Addr::new(10, 0, node as u8, 1)),
        ran: port(PortId::Ran, sim_ran_addr(node)),
        seed,
    };
    let app = Lte::new(
        LteConfig {
            ran_addrs: (0..nodes).map(sim_ran_addr).collect(),
            ran_mtu: 1500,
            icmp_src: Ipv4Addr::new(10, 0, node as u8, 1),
            icmp_src6: crate::lte::default_icmp_src6(node),
        },
        uplink,
    );
    Engine::new(cfg, gpt, fib, app, batch)
}

/// N engines in one process joined by an ideal fabric (frames to a node's fabric MAC reach its
/// fabric port in order, nothing is lost), driven one batch at a time: deterministic.
pub struct SimCluster {
    /// The engines, by node.
    pub engines: Vec<Engine<Lte>>,
    /// Frames each node sent out of `ran` (downstream GTP-U and echo responses).
    pub ran_out: Vec<Vec<Vec<u8>>>,
    /// Frames each node sent out of `inet` (upstream, ARP answers).
    pub inet_out: Vec<Vec<Vec<u8>>>,
    /// Frames on the fabric that named no node's MAC.
    pub fabric_lost: u64,
    fabric_in: Vec<PacketBatch>,
    out: Outputs,
    batch: usize,
}

impl SimCluster {
    /// A cluster of `nodes` engines for `arch` over `tunnels` (the tables built here, with our
    /// cuckoo FIB and seed `seed`), processing batches of `batch` frames.
    pub fn new(
        arch: Arch,
        tunnels: &[Tunnel],
        nodes: u16,
        seed: u64,
        batch: usize,
    ) -> Result<SimCluster, Box<dyn std::error::Error + Send + Sync>> {
        let gpt = match arch {
            Arch::ScaleBricks => Some(crate::Gpt::from(build_gpt(tunnels, nodes.into(), seed, 0)?)),
            _ => None,
        };
        let fibs = (0..nodes)
            .map(|n| {
                build_cuckoo_fib(arch, tunnels, n, nodes, seed).map(|f| Box::new(f) as Box<dyn Fib>)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::with_fibs(arch, tunnels, nodes, seed, batch, gpt, fibs)
    }

    /// Like [`new`](Self::new) with the GPT and the FIBs given (another backend, tables built
    /// elsewhere).
    pub fn with_fibs(
        arch: Arch,
        tunnels: &[Tunnel],
        nodes: u16,
        seed: u64,
        batch: usize,
        gpt: Option<crate::Gpt>,
        fibs: Vec<Box<dyn Fib>>,
    ) -> Result<SimCluster, Box<dyn std::error::Error + Send + Sync>> {
        let mut engines = Vec::new();
        for (n, fib) in (0..nodes).zip(fibs) {
            let uplink = Lte::uplink_table(tunnels.iter().filter(|t| t.node == n), seed)?;
            engines.push(sim_engine(
                arch,
                n,
                nodes,
                seed,
                gpt.clone(),
                fib,
                uplink,
                batch,
            )?);
        }
        let n = usize::from(nodes);
        Ok(SimCluster {
            engines,
            ran_out: vec![Vec::new(); n],
            inet_out: vec![Vec::new(); n],
            fabric_lost: 0,
            fabric_in: (0..n).map(|_| PacketBatch::new(batch)).collect(),
            out: Outputs::new(batch, sb_packet::DEFAULT_BUF_SIZE),
            batch,
        })
    }

    /// Feeds `frames` into node `node`'s port `port` (in batches), then runs the fabric until
    /// no frame is in flight. Outputs accumulate in `ran_out` / `inet_out`.
    pub fn inject(&mut self, node: u16, port: PortId, frames: &[Vec<u8>]) {
        let mut rx = PacketBatch::new(self.batch);
        for chunk in frames.chunks(self.batch) {
            for f in chunk {
                assert!(rx.push(f), "frame larger than a batch buffer");
            }
            self.process(node, port, &mut rx);
            self.drain_fabric();
        }
    }

    fn process(&mut self, node: u16, port: PortId, rx: &mut PacketBatch) {
        let n = usize::from(node);
        self.engines[n].process(port, rx, &mut self.out);
        for f in self.out.ran.iter() {
            self.ran_out[n].push(f.to_vec());
        }
        for f in self.out.inet.iter() {
            self.inet_out[n].push(f.to_vec());
        }
        self.out.ran.clear();
        self.out.inet.clear();
        for i in 0..self.out.fabric.len() {
            let dst = &self.out.fabric.get(i)[..6];
            match (0..self.engines.len()).find(|&k| self.engines[k].config().fabric_macs[k] == dst)
            {
                Some(k) => {
                    if !self.fabric_in[k].push(self.out.fabric.get(i)) {
                        self.fabric_lost += 1;
                    }
                }
                None => self.fabric_lost += 1,
            }
        }
        self.out.fabric.clear();
    }

    /// Delivers every frame in flight on the fabric, until none is left.
    pub fn drain_fabric(&mut self) {
        loop {
            let Some(k) = (0..self.fabric_in.len()).find(|&k| !self.fabric_in[k].is_empty()) else {
                return;
            };
            let mut b = std::mem::replace(&mut self.fabric_in[k], PacketBatch::new(1));
            self.process(k as u16, PortId::Fabric, &mut b);
            b.clear();
            self.fabric_in[k] = b;
        }
    }

    /// Every engine's counters summed.
    pub fn counters(&self) -> crate::Counters {
        let mut c = crate::Counters::default();
        for e in &self.engines {
            c.add(e.counters());
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tunnels_are_distinct_in_the_pool_and_reproducible() {
        for (pool, len, count, v6) in [
            ((100, 64, 0, 0), 10, 50_000, 0),
            ((10, 0, 0, 0), 16, 20_000, 7),
            ((192, 168, 1, 0), 24, 100, 0),
        ] {
            let pool = Ipv4Addr::new(pool.0, pool.1, pool.2, pool.3);
            let t = generate_tunnels_in(pool, len, count, 5, 3, v6);
            assert_eq!(t.len(), count);
            let ues: std::collections::HashSet<_> = t.iter().map(|x| x.ue).collect();
            let teids: std::collections::HashSet<_> = t.iter().map(|x| x.teid).collect();
            assert_eq!((ues.len(), teids.len()), (count, count));
            assert!(t.iter().all(|x| x.teid != 0 && x.node < 5));
            let mask = u32::MAX << (32 - len);
            for x in &t {
                if let IpAddr::V4(a) = x.ue {
                    assert_eq!(u32::from(a) & mask, u32::from(pool));
                    assert!(!matches!(u32::from(a) & 0xff, 0 | 255) || len > 24);
                }
            }
            assert_eq!(t, generate_tunnels_in(pool, len, count, 5, 3, v6));
            assert_ne!(t, generate_tunnels_in(pool, len, count, 5, 4, v6));
            // Spread over the nodes.
            let on0 = t.iter().filter(|x| x.node == 0).count();
            assert!(count < 1000 || (on0 as f64 / count as f64 - 0.2).abs() < 0.02);
        }
    }
}
