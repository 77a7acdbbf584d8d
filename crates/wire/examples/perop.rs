//! Per-operation cost on a busy machine: runs each operation in many short windows and reports
//! the fastest window (descheduled windows are slower, never faster), as JSON lines.
//!
//! `cargo run --release -p sb-wire --example perop`

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use sb_wire::{decapsulate, parse_frame, EthernetAddress, GtpuTunnel, OuterIp, PacketBuilder};

const MAC1: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const MAC2: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

fn min_ns_per_op(mut f: impl FnMut()) -> f64 {
    const WINDOWS: usize = 300;
    const ITERS: usize = 2000;
    let mut best = f64::MAX;
    for _ in 0..WINDOWS {
        let t = Instant::now();
        for _ in 0..ITERS {
            f();
        }
        best = best.min(t.elapsed().as_nanos() as f64 / ITERS as f64);
    }
    best
}

fn report(name: &str, ns: f64) {
    println!("{{\"op\": \"{name}\", \"ns_per_op_min_window\": {ns:.1}}}");
}

fn main() {
    println!(
        "{{\"size_of_ParsedFrame\": {}, \"size_of_IpInfo\": {}}}",
        std::mem::size_of::<sb_wire::ParsedFrame<'static>>(),
        std::mem::size_of::<sb_wire::IpInfo<'static>>()
    );
    let (server, ue) = (Ipv4Addr::new(203, 0, 113, 9), Ipv4Addr::new(10, 0, 0, 7));
    let b = PacketBuilder::udp(MAC1, MAC2, server.into(), ue.into(), 443, 5000);
    for payload in [18usize, 1430] {
        let mut buf = vec![0u8; 2048];
        let headroom = 128;
        let n = b.build(&vec![0x42; payload], &mut buf[headroom..]).unwrap();
        let frame = buf[headroom..headroom + n].to_vec();
        report(
            &format!("parse_frame/ipv4_udp_{}B", n),
            min_ns_per_op(|| {
                black_box(parse_frame(black_box(&frame)).unwrap().dst_addr());
            }),
        );
        let p = parse_frame(&frame).unwrap();
        report(
            "five_tuple_key/ipv4",
            min_ns_per_op(|| {
                black_box(black_box(&p).five_tuple().unwrap().key());
            }),
        );
        let inner_start = headroom + 14;
        let inner_len = n - 14;
        for (name, outer, csum) in [
            (
                "v4",
                OuterIp::V4 {
                    src: Ipv4Addr::new(192, 0, 2, 1),
                    dst: Ipv4Addr::new(192, 0, 2, 2),
                },
                false,
            ),
            (
                "v4_udpcsum",
                OuterIp::V4 {
                    src: Ipv4Addr::new(192, 0, 2, 1),
                    dst: Ipv4Addr::new(192, 0, 2, 2),
                },
                true,
            ),
            (
                "v6",
                OuterIp::V6 {
                    src: Ipv6Addr::LOCALHOST,
                    dst: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
                },
                false,
            ),
        ] {
            let t = GtpuTunnel {
                udp_checksum_v4: csum,
                ..GtpuTunnel::new(MAC1, MAC2, outer, 0x1234)
            };
            let mut work = buf.clone();
            report(
                &format!("encap_in_place/{name}/inner_{}B", inner_len),
                min_ns_per_op(|| {
                    black_box(
                        t.encap_in_place(black_box(&mut work), inner_start, inner_len)
                            .unwrap(),
                    );
                }),
            );
            let start = t.encap_in_place(&mut work, inner_start, inner_len).unwrap();
            let enc = work[start..inner_start + inner_len].to_vec();
            report(
                &format!("parse_frame/gtpu_{name}_{}B", enc.len()),
                min_ns_per_op(|| {
                    black_box(parse_frame(black_box(&enc)).unwrap().teid());
                }),
            );
            report(
                &format!("decapsulate/{name}_{}B", enc.len()),
                min_ns_per_op(|| {
                    black_box(decapsulate(black_box(&enc)).unwrap().teid);
                }),
            );
        }
    }
}
