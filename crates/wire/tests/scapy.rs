//! Frames built by scapy (a tool we did not write) decode to the same fields in `parse_frame`.
//!
//! `scapy_frames.py` writes ~55 varied frames (VLAN, IPv4 options, fragments, IPv6 extension
//! headers, TCP flags and options, ICMP/ICMPv6, ARP, GTP-U with sequence / N-PDU numbers and
//! extension-header chains, outer/inner IPv4/IPv6, and malformed ones) with the values scapy
//! dissects from them; this test compares field by field.

mod tools;

use std::net::IpAddr;
use std::process::Command;

use sb_wire::{
    parse_frame, parse_frame_with, FrameKind, GtpuPacket, IcmpRepr, IpInfo, ParseOptions, L4,
};
use serde_json::Value;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("expected a number, got {v}"))
}

fn opt_u(v: &Value) -> Option<u64> {
    v.as_u64()
}

fn ip(v: &Value) -> IpAddr {
    v.as_str().unwrap().parse().unwrap()
}

fn check_ip(name: &str, e: &Value, got: &IpInfo<'_>) {
    let ctx = |f: &str| format!("{name}: {f}");
    assert_eq!(got.offset as u64, u(&e["offset"]), "{}", ctx("ip offset"));
    assert_eq!(
        if got.is_ipv6() { 6 } else { 4 },
        u(&e["version"]),
        "{}",
        ctx("version")
    );
    assert_eq!(got.src_addr, ip(&e["src"]), "{}", ctx("src"));
    assert_eq!(got.dst_addr, ip(&e["dst"]), "{}", ctx("dst"));
    assert_eq!(
        u64::from(got.protocol),
        u(&e["proto"]),
        "{}",
        ctx("protocol")
    );
    assert_eq!(u64::from(got.ttl), u(&e["ttl"]), "{}", ctx("ttl"));
    assert_eq!(
        got.packet.len() as u64,
        u(&e["len"]),
        "{}",
        ctx("ip length")
    );
    assert_eq!(
        got.l4_offset as u64,
        u(&e["l4_offset"]),
        "{}",
        ctx("l4 offset")
    );
    match (&e["frag"], got.fragment) {
        (Value::Null, None) => {}
        (f, Some(g)) if !f.is_null() => {
            assert_eq!(
                u64::from(g.offset),
                u(&f["offset"]),
                "{}",
                ctx("frag offset")
            );
            assert_eq!(g.more, f["more"].as_bool().unwrap(), "{}", ctx("frag more"));
            assert_eq!(u64::from(g.ident), u(&f["ident"]), "{}", ctx("frag ident"));
        }
        (f, g) => panic!("{}: fragment expected {f}, got {g:?}", name),
    }
    let l4 = &e["l4"];
    match got.l4 {
        L4::Udp {
            src_port,
            dst_port,
            len,
        } => {
            let x = &l4["udp"];
            assert_eq!(
                [u64::from(src_port), u64::from(dst_port), u64::from(len)],
                [u(&x[0]), u(&x[1]), u(&x[2])],
                "{}",
                ctx("udp")
            );
        }
        L4::Tcp {
            src_port,
            dst_port,
            flags,
        } => {
            let x = &l4["tcp"];
            assert_eq!(
                [u64::from(src_port), u64::from(dst_port), u64::from(flags.0)],
                [u(&x[0]), u(&x[1]), u(&x[2])],
                "{}",
                ctx("tcp")
            );
        }
        L4::Icmp { repr, .. } => {
            let x = &l4["icmp"];
            assert!(!x.is_null(), "{}", ctx("icmp expected"));
            let (ident, seq) = match repr {
                IcmpRepr::EchoRequest { ident, seq } | IcmpRepr::EchoReply { ident, seq } => {
                    (Some(ident), Some(seq))
                }
                IcmpRepr::Other { .. } => (None, None),
            };
            let raw = &got.packet[got.l4_offset - got.offset..];
            assert_eq!(
                [u64::from(raw[0]), u64::from(raw[1])],
                [u(&x[0]), u(&x[1])],
                "{}",
                ctx("icmp type/code")
            );
            assert_eq!(ident.map(u64::from), opt_u(&x[2]), "{}", ctx("icmp ident"));
            assert_eq!(seq.map(u64::from), opt_u(&x[3]), "{}", ctx("icmp seq"));
        }
        L4::Unparsed => assert!(l4.is_null(), "{}: l4 expected {l4}, got unparsed", name),
    }
}

#[test]
fn scapy_frames_decode_to_scapys_fields() {
    let Some(py) = tools::python_with_scapy() else {
        return;
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scapy_frames.py");
    let out = Command::new(&py).arg(script).output().expect("run python");
    assert!(
        out.status.success(),
        "scapy_frames.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON from scapy_frames.py");
    let frames = doc["frames"].as_array().unwrap();
    assert!(
        frames.len() >= 50,
        "expected the full frame set, got {}",
        frames.len()
    );
    let strict = ParseOptions {
        verify_l4_checksum: true,
        ..ParseOptions::default()
    };
    let (mut good, mut bad) = (0, 0);
    for f in frames {
        let name = f["name"].as_str().unwrap();
        let bytes = hex(f["hex"].as_str().unwrap());
        if let Some(label) = f["error"].as_str() {
            let got = parse_frame(&bytes);
            assert_eq!(
                got.map_err(|e| e.label()).err(),
                Some(label),
                "{name}: expected rejection {label}"
            );
            bad += 1;
            continue;
        }
        let e = &f["expect"];
        let p = parse_frame_with(&bytes, &strict)
            .unwrap_or_else(|err| panic!("{name}: rejected: {err} ({})", err.label()));
        assert_eq!(
            p.eth.src_addr.to_string(),
            e["eth"]["src"].as_str().unwrap(),
            "{name}: eth src"
        );
        assert_eq!(
            p.eth.dst_addr.to_string(),
            e["eth"]["dst"].as_str().unwrap(),
            "{name}: eth dst"
        );
        assert_eq!(
            u64::from(p.eth.ethertype.0),
            u(&e["eth"]["ethertype"]),
            "{name}: ethertype"
        );
        match (&e["eth"]["vlan"], p.eth.vlan) {
            (Value::Null, None) => {}
            (v, Some(t)) if !v.is_null() => {
                assert_eq!(u64::from(t.vid), u(&v["vid"]), "{name}: vid");
                assert_eq!(u64::from(t.pcp), u(&v["pcp"]), "{name}: pcp");
                assert_eq!(u64::from(t.dei), u(&v["dei"]), "{name}: dei");
            }
            (v, t) => panic!("{name}: vlan expected {v}, got {t:?}"),
        }
        assert_eq!(p.l3_offset as u64, u(&e["l3_offset"]), "{name}: l3 offset");
        match (e["kind"].as_str().unwrap(), &p.kind) {
            ("arp", FrameKind::Arp(a)) => {
                let x = &e["arp"];
                assert_eq!(
                    u64::from(u16::from(a.operation)),
                    u(&x["op"]),
                    "{name}: arp op"
                );
                assert_eq!(
                    a.sender_hw.to_string(),
                    x["sender_hw"].as_str().unwrap(),
                    "{name}"
                );
                assert_eq!(
                    a.target_hw.to_string(),
                    x["target_hw"].as_str().unwrap(),
                    "{name}"
                );
                assert_eq!(IpAddr::V4(a.sender_ip), ip(&x["sender_ip"]), "{name}");
                assert_eq!(IpAddr::V4(a.target_ip), ip(&x["target_ip"]), "{name}");
            }
            ("ip", FrameKind::Ip(i)) => check_ip(name, &e["ip"], i),
            ("gtpu", FrameKind::Gtpu(g)) => {
                let x = &e["gtpu"];
                assert_eq!(g.gtpu_offset as u64, u(&x["offset"]), "{name}: gtpu offset");
                assert_eq!(u64::from(g.msg_type), u(&x["msg_type"]), "{name}: msg type");
                assert_eq!(u64::from(g.teid), u(&x["teid"]), "{name}: teid");
                assert_eq!(g.seq_number.map(u64::from), opt_u(&x["seq"]), "{name}: seq");
                assert_eq!(
                    g.npdu_number.map(u64::from),
                    opt_u(&x["npdu"]),
                    "{name}: npdu"
                );
                assert_eq!(
                    g.first_ext_type.map(u64::from),
                    opt_u(&x["next_ext"]),
                    "{name}: next ext"
                );
                let view = GtpuPacket::new_checked(&bytes[g.gtpu_offset..]).unwrap();
                let exts: Vec<[u64; 2]> = view
                    .extensions()
                    .map(|x| [u64::from(x.ext_type), x.content.len() as u64])
                    .collect();
                let want: Vec<[u64; 2]> = x["exts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| [u(&x[0]), u(&x[1])])
                    .collect();
                assert_eq!(exts, want, "{name}: extension headers");
                check_ip(&format!("{name} (outer)"), &x["outer"], &g.outer);
                match (&x["inner"], &g.inner) {
                    (Value::Null, None) => {}
                    (v, Some(i)) if !v.is_null() => {
                        check_ip(&format!("{name} (inner)"), v, i);
                        assert_eq!(p.dst_addr(), Some(ip(&v["dst"])), "{name}: inner dst key");
                    }
                    (v, i) => panic!("{name}: inner expected {v}, got {i:?}"),
                }
            }
            ("other", FrameKind::Other(_)) => {}
            (k, got) => panic!("{name}: expected {k}, got {got:?}"),
        }
        good += 1;
    }
    eprintln!(
        "scapy {}: {good} frames decoded alike, {bad} malformed frames rejected alike",
        doc["scapy_version"]
    );
}
