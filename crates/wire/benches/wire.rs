//! Micro-benchmarks: `parse_frame` on plain and GTP-U frames, flow-key bytes, encapsulation in
//! place (with and without the UDP checksum pass), decapsulation.
//!
//! `cargo bench -p sb-wire --bench wire`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sb_wire::{decapsulate, parse_frame, EthernetAddress, GtpuTunnel, OuterIp, PacketBuilder};

const MAC1: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const MAC2: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

fn plain(payload: usize) -> (Vec<u8>, usize) {
    let b = PacketBuilder::udp(
        MAC1,
        MAC2,
        Ipv4Addr::new(203, 0, 113, 9).into(),
        Ipv4Addr::new(10, 0, 0, 7).into(),
        443,
        5000,
    );
    let mut v = vec![0u8; 128 + b.header_len() + payload];
    let n = b.build(&vec![0x42; payload], &mut v[128..]).unwrap();
    v.truncate(128 + n);
    (v, 128)
}

fn tunnel(v6: bool, csum: bool) -> GtpuTunnel {
    let outer = if v6 {
        OuterIp::V6 {
            src: Ipv6Addr::LOCALHOST,
            dst: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
        }
    } else {
        OuterIp::V4 {
            src: Ipv4Addr::new(192, 0, 2, 1),
            dst: Ipv4Addr::new(192, 0, 2, 2),
        }
    };
    GtpuTunnel {
        udp_checksum_v4: csum,
        ..GtpuTunnel::new(MAC1, MAC2, outer, 0x1234)
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("wire");
    g.throughput(Throughput::Elements(1));
    let (small, off) = plain(18); // 64-byte frame
    let small = small[off..].to_vec();
    g.bench_function("parse_frame/ipv4_udp_64B", |b| {
        b.iter(|| parse_frame(black_box(&small)).unwrap().dst_addr())
    });
    g.bench_function("five_tuple_key/ipv4", |b| {
        let p = parse_frame(&small).unwrap();
        b.iter(|| black_box(&p).five_tuple().unwrap().key())
    });
    for (name, v6, csum, payload) in [
        ("v4_nocsum_64B", false, false, 18usize),
        ("v4_nocsum_1400B", false, false, 1358),
        ("v4_csum_1400B", false, true, 1358),
        ("v6_1400B", true, false, 1358),
    ] {
        let (frame, off) = plain(payload);
        let t = tunnel(v6, csum);
        let inner_start = off + 14;
        let inner_len = frame.len() - inner_start;
        let mut buf = frame.clone();
        g.bench_function(format!("encap_in_place/{name}"), |b| {
            b.iter(|| {
                t.encap_in_place(black_box(&mut buf), inner_start, inner_len)
                    .unwrap()
            })
        });
        let start = t.encap_in_place(&mut buf, inner_start, inner_len).unwrap();
        let enc = buf[start..].to_vec();
        g.bench_function(format!("parse_frame/gtpu_{name}"), |b| {
            b.iter(|| parse_frame(black_box(&enc)).unwrap().teid())
        });
        g.bench_function(format!("decapsulate/{name}"), |b| {
            b.iter(|| decapsulate(black_box(&enc)).unwrap().teid)
        });
    }
    let v6 = PacketBuilder::udp(
        MAC1,
        MAC2,
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7)),
        1,
        2,
    );
    let mut f6 = vec![0u8; 128];
    let n = v6.build(&[0u8; 20], &mut f6).unwrap();
    f6.truncate(n);
    g.bench_function("parse_frame/ipv6_udp", |b| {
        b.iter(|| parse_frame(black_box(&f6)).unwrap().dst_addr())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
