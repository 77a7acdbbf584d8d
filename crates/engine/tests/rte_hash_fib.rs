//! The rte_hash FIB backend (feature `dpdk`) forwards exactly what the cuckoo backend does: the
//! same cluster, the same packets, the same outputs frame for frame.
#![cfg(feature = "dpdk")]

use sb_engine::cluster::{build_gpt, fib_slice, generate_tunnels, SimCluster};
use sb_engine::{Arch, Fib, PortId, RteHashFib};

#[test]
fn rte_hash_backend_forwards_like_the_cuckoo_backend() {
    sb_peers::dpdk::eal_init(256).expect("DPDK EAL (no hugepages)");
    let tunnels = generate_tunnels(3000, 4, 5, 4);
    for arch in Arch::ALL {
        let gpt = (arch == Arch::ScaleBricks)
            .then(|| sb_engine::Gpt::from(build_gpt(&tunnels, 4, 5, 0).unwrap()));
        let fibs: Vec<Box<dyn Fib>> = (0..4)
            .map(|n| {
                let kv: Vec<([u8; 16], [u8; sb_engine::lte::VALUE_BYTES])> =
                    fib_slice(arch, &tunnels, n, 4, 5)
                        .iter()
                        .map(|&i| (tunnels[i].key(), tunnels[i].value()))
                        .collect();
                Box::new(
                    RteHashFib::build(
                        16,
                        sb_engine::lte::VALUE_BYTES,
                        kv.iter().map(|(k, v)| (&k[..], &v[..])),
                    )
                    .unwrap(),
                ) as Box<dyn Fib>
            })
            .collect();
        let mut rte = SimCluster::with_fibs(arch, &tunnels, 4, 5, 32, gpt, fibs).unwrap();
        let mut ours = SimCluster::new(arch, &tunnels, 4, 5, 32).unwrap();
        for (i, t) in tunnels.iter().enumerate().step_by(3) {
            let b = sb_wire::PacketBuilder::udp(
                sb_wire::EthernetAddress([2; 6]),
                sb_wire::EthernetAddress([4; 6]),
                match t.ue {
                    std::net::IpAddr::V4(_) => "203.0.113.1".parse().unwrap(),
                    std::net::IpAddr::V6(_) => "2001:db8:ff::1".parse().unwrap(),
                },
                t.ue,
                1,
                2,
            );
            let mut f = vec![0u8; b.header_len() + 8];
            b.build(&(i as u64).to_be_bytes(), &mut f).unwrap();
            let node = (i % 4) as u16;
            rte.inject(node, PortId::Inet, &[f.clone()]);
            ours.inject(node, PortId::Inet, &[f]);
        }
        assert_eq!(
            rte.ran_out, ours.ran_out,
            "{arch}: the same frames at the same nodes"
        );
        assert_eq!(rte.counters(), ours.counters(), "{arch}");
        assert_eq!(
            rte.counters().ports.iter().map(|p| p.dropped).sum::<u64>(),
            0
        );
        assert_eq!(rte.engines[0].fib().name(), "rte_hash");
    }
}
