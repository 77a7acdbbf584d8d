//! Our GTP-U encapsulation decodes correctly in tshark (a decoder we did not write): TEID,
//! sequence number, outer and inner addresses, lengths, checksums all good, nothing malformed.
//!
//! The pcap is written by hand (classic libpcap format, little-endian, link type Ethernet).

mod common;
mod tools;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;

use common::*;
use sb_wire::{EthernetAddress, GtpuTunnel, IcmpRepr, OuterIp, TcpFlags, VlanTag};

/// Classic pcap: global header then (record header, bytes) per packet.
fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    v.extend_from_slice(&2u16.to_le_bytes());
    v.extend_from_slice(&4u16.to_le_bytes());
    v.extend_from_slice(&0i32.to_le_bytes()); // thiszone
    v.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
    v.extend_from_slice(&65535u32.to_le_bytes()); // snaplen
    v.extend_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
    for (i, f) in frames.iter().enumerate() {
        v.extend_from_slice(&(1_700_000_000u32 + i as u32).to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(f);
    }
    v
}

struct Case {
    tunnel: GtpuTunnel,
    inner: Vec<u8>,
    inner_src: IpAddr,
    inner_dst: IpAddr,
}

fn cases() -> Vec<Case> {
    let macs = (
        EthernetAddress([2, 0, 0, 0, 1, 1]),
        EthernetAddress([2, 0, 0, 0, 1, 2]),
    );
    let o4 = OuterIp::V4 {
        src: Ipv4Addr::new(192, 0, 2, 1),
        dst: Ipv4Addr::new(192, 0, 2, 200),
    };
    let o6 = OuterIp::V6 {
        src: Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 1),
        dst: Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 2),
    };
    let server4: IpAddr = Ipv4Addr::new(203, 0, 113, 5).into();
    let ue4: IpAddr = Ipv4Addr::new(10, 45, 0, 77).into();
    let server6: IpAddr = Ipv6Addr::new(0x2001, 0x4860, 0, 0, 0, 0, 0, 0x8888).into();
    let ue6: IpAddr = Ipv6Addr::new(0x2001, 0xdb8, 0x45, 0, 0, 0, 0, 0x77).into();
    let inners: Vec<(IpAddr, IpAddr, L4Spec, usize)> = vec![
        (server4, ue4, L4Spec::Udp(443, 50000), 64),
        (
            server4,
            ue4,
            L4Spec::Tcp(80, 40000, TcpFlags::ACK | TcpFlags::PSH),
            1000,
        ),
        (
            server4,
            ue4,
            L4Spec::Icmp(IcmpRepr::EchoReply { ident: 5, seq: 6 }),
            32,
        ),
        (server6, ue6, L4Spec::Udp(40053, 33333), 100),
        (
            server6,
            ue6,
            L4Spec::Tcp(443, 50001, TcpFlags::SYN | TcpFlags::ACK),
            0,
        ),
        (server4, ue4, L4Spec::Udp(1, 2), 1),
    ];
    let mut out = Vec::new();
    for (i, (s, d, l4, n)) in inners.into_iter().enumerate() {
        let payload: Vec<u8> = (0..n).map(|k| (k * 7 + i) as u8).collect();
        let (p, seg) = l4_segment(s, d, l4, &payload);
        let inner = ip_packet(s, d, p, &seg, &[]);
        for (j, outer) in [o4, o6].into_iter().enumerate() {
            for csum in [false, true] {
                let teid = 0x1000_0000 + (i as u32) * 16 + (j as u32) * 2 + u32::from(csum);
                let tunnel = GtpuTunnel {
                    udp_checksum_v4: csum,
                    seq_number: csum.then_some(i as u16 * 100),
                    vlan: (i % 3 == 2).then_some(VlanTag {
                        pcp: 0,
                        dei: false,
                        vid: 42,
                    }),
                    udp_src_port: if csum { 40000 + i as u16 } else { 2152 },
                    ident: i as u16,
                    ..GtpuTunnel::new(macs.0, macs.1, outer, teid)
                };
                out.push(Case {
                    tunnel,
                    inner: inner.clone(),
                    inner_src: s,
                    inner_dst: d,
                });
            }
        }
    }
    out
}

const FIELDS: &[&str] = &[
    "frame.number",
    "gtp.teid",
    "gtp.message",
    "gtp.length",
    "gtp.seq_number",
    "ip.src",
    "ip.dst",
    "ipv6.src",
    "ipv6.dst",
    "udp.dstport",
    "udp.length",
    "ip.checksum.status",
    "udp.checksum.status",
    "tcp.checksum.status",
    "icmp.checksum.status",
    "icmpv6.checksum.status",
    "_ws.malformed",
    "_ws.expert.severity",
    "_ws.expert.message",
    "vlan.id",
    "gtp.recovery",
];

fn list(s: &str) -> Vec<&str> {
    if s.is_empty() {
        vec![]
    } else {
        s.split(',').collect()
    }
}

/// Writes `frames` to a pcap, runs tshark with checksum verification on, and returns one row of
/// `FIELDS` values per packet.
fn run_tshark(tshark: &str, frames: &[Vec<u8>], tag: &str) -> Vec<Vec<String>> {
    let dir = std::env::temp_dir().join(format!("sb-wire-tshark-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("frames.pcap");
    std::fs::write(&file, pcap(frames)).unwrap();
    let mut cmd = Command::new(tshark);
    cmd.args(["-n", "-r"]).arg(&file);
    for o in [
        "ip.check_checksum:TRUE",
        "udp.check_checksum:TRUE",
        "tcp.check_checksum:TRUE",
    ] {
        cmd.args(["-o", o]);
    }
    cmd.args([
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark failed: {stderr}");
    let rows: Vec<Vec<String>> = stdout
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect();
    assert_eq!(
        rows.len(),
        frames.len(),
        "one row per packet; stderr: {stderr}\n{stdout}"
    );
    rows
}

fn col(r: &[String], name: &str) -> String {
    let i = FIELDS.iter().position(|f| *f == name).unwrap();
    r.get(i).cloned().unwrap_or_default()
}

/// No malformed-packet marker and no expert info at error level (severity 0x00800000).
fn assert_clean(r: &[String], ctx: &str) {
    assert_eq!(col(r, "_ws.malformed"), "", "{ctx}: malformed");
    let sevs = col(r, "_ws.expert.severity");
    let msgs = col(r, "_ws.expert.message");
    for (sev, msg) in list(&sevs).iter().zip(list(&msgs)) {
        assert_ne!(*sev, "8388608", "{ctx}: expert error: {msg}");
    }
}

#[test]
fn tshark_decodes_our_echo_response() {
    let Some(tshark) = tools::tshark() else {
        return;
    };
    let req = sb_wire::GtpuRepr {
        msg_type: sb_wire::gtpu::msg_type::ECHO_REQUEST,
        teid: 0,
        seq_number: Some(0x0102),
        npdu_number: None,
        extensions: None,
    };
    let msg = gtpu_message(&req, &[]);
    let s: IpAddr = Ipv4Addr::new(192, 0, 2, 7).into();
    let d: IpAddr = Ipv4Addr::new(192, 0, 2, 1).into();
    let (p, seg) = l4_segment(s, d, L4Spec::Udp(2152, 2152), &msg);
    let request = ip_frame(None, &ip_packet(s, d, p, &seg, &[]));
    let mut out = vec![0u8; 128];
    let n = sb_wire::answer_echo_request(&request, &mut out)
        .unwrap()
        .unwrap();
    out.truncate(n);
    let rows = run_tshark(&tshark, &[request, out], "echo");
    for (r, (msg, src)) in rows
        .iter()
        .zip([("0x01", "192.0.2.7"), ("0x02", "192.0.2.1")])
    {
        let ctx = r.join("|");
        assert_eq!(col(r, "gtp.message"), msg, "{ctx}");
        assert_eq!(col(r, "gtp.seq_number"), "0x0102", "{ctx}");
        assert_eq!(col(r, "ip.src"), src, "{ctx}");
        assert_eq!(col(r, "ip.checksum.status"), "1", "{ctx}");
        assert_eq!(col(r, "udp.checksum.status"), "1", "{ctx}");
        assert_clean(r, &ctx);
    }
    assert_eq!(
        col(&rows[1], "gtp.recovery"),
        "0",
        "the response carries a Recovery IE"
    );
}

#[test]
fn tshark_decodes_our_end_marker() {
    let Some(tshark) = tools::tshark() else {
        return;
    };
    let mac = EthernetAddress([2, 0, 0, 0, 1, 1]);
    let frames: Vec<Vec<u8>> = [
        OuterIp::V4 {
            src: Ipv4Addr::new(192, 0, 2, 1),
            dst: Ipv4Addr::new(192, 0, 2, 200),
        },
        OuterIp::V6 {
            src: Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 1),
            dst: Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 2),
        },
    ]
    .iter()
    .map(|o| {
        let mut out = vec![0u8; 128];
        let n = sb_wire::end_marker(mac, mac, *o, 0xcafe_0001, &mut out).unwrap();
        out.truncate(n);
        out
    })
    .collect();
    let rows = run_tshark(&tshark, &frames, "end-marker");
    for r in &rows {
        let ctx = r.join("|");
        assert_eq!(col(r, "gtp.message"), "0xfe", "{ctx}");
        assert_eq!(col(r, "gtp.teid"), "0xcafe0001", "{ctx}");
        assert_eq!(col(r, "gtp.length"), "0", "{ctx}");
        assert_eq!(col(r, "udp.dstport"), "2152", "{ctx}");
        assert_eq!(col(r, "udp.checksum.status"), "1", "{ctx}");
        assert_clean(r, &ctx);
    }
    assert_eq!(col(&rows[0], "ip.dst"), "192.0.2.200");
    assert_eq!(col(&rows[0], "ip.checksum.status"), "1");
}

#[test]
fn tshark_decodes_our_gtpu_encapsulation() {
    let Some(tshark) = tools::tshark() else {
        return;
    };
    let cases = cases();
    let frames: Vec<Vec<u8>> = cases
        .iter()
        .map(|c| {
            let mut buf = vec![0u8; 2048];
            let n = c.tunnel.encap_into(&c.inner, &mut buf).unwrap();
            buf.truncate(n);
            buf
        })
        .collect();
    let rows = run_tshark(&tshark, &frames, "encap");
    for (k, (c, r)) in cases.iter().zip(&rows).enumerate() {
        let ctx = format!("packet {} ({:?}): {}", k + 1, c.tunnel.outer, r.join("|"));
        assert_eq!(col(r, "frame.number"), (k + 1).to_string(), "{ctx}");
        assert_eq!(
            col(r, "gtp.teid"),
            format!("0x{:08x}", c.tunnel.teid),
            "{ctx}"
        );
        assert_eq!(col(r, "gtp.message"), "0xff", "{ctx}");
        let gtp_len = c.inner.len() + if c.tunnel.seq_number.is_some() { 4 } else { 0 };
        assert_eq!(col(r, "gtp.length"), gtp_len.to_string(), "{ctx}");
        assert_eq!(
            col(r, "gtp.seq_number"),
            c.tunnel
                .seq_number
                .map(|s| format!("0x{s:04x}"))
                .unwrap_or_default(),
            "{ctx}"
        );
        // Outer then inner addresses, per family.
        let (mut v4, mut v6) = (Vec::<String>::new(), Vec::<String>::new());
        let (mut d4, mut d6) = (Vec::<String>::new(), Vec::<String>::new());
        let (os, od) = match c.tunnel.outer {
            OuterIp::V4 { src, dst } => (IpAddr::V4(src), IpAddr::V4(dst)),
            OuterIp::V6 { src, dst } => (IpAddr::V6(src), IpAddr::V6(dst)),
        };
        for (s, d) in [(os, od), (c.inner_src, c.inner_dst)] {
            if s.is_ipv4() {
                v4.push(s.to_string());
                d4.push(d.to_string());
            } else {
                v6.push(s.to_string());
                d6.push(d.to_string());
            }
        }
        assert_eq!(list(&col(r, "ip.src")), v4, "{ctx}");
        assert_eq!(list(&col(r, "ip.dst")), d4, "{ctx}");
        assert_eq!(list(&col(r, "ipv6.src")), v6, "{ctx}");
        assert_eq!(list(&col(r, "ipv6.dst")), d6, "{ctx}");
        let udp_len = 8 + 8 + gtp_len;
        let lens = col(r, "udp.length");
        assert_eq!(list(&lens)[0], udp_len.to_string(), "{ctx}");
        assert_eq!(list(&col(r, "udp.dstport"))[0], "2152", "{ctx}");
        // Checksum status: 1 = good, 2 = unverified, 3 = not present; never 0 (bad).
        let outer_udp_csum = list(&col(r, "udp.checksum.status"))[0].to_string();
        let want = if c.tunnel.udp_checksum_v4 || os.is_ipv6() {
            "1"
        } else {
            "3"
        };
        assert_eq!(outer_udp_csum, want, "{ctx}");
        for f in [
            "ip.checksum.status",
            "udp.checksum.status",
            "tcp.checksum.status",
            "icmp.checksum.status",
            "icmpv6.checksum.status",
        ] {
            for s in list(&col(r, f)) {
                assert!(s == "1" || s == "3" || s == "2", "{ctx}: {f} = {s}");
            }
        }
        for s in list(&col(r, "ip.checksum.status")) {
            assert_eq!(s, "1", "{ctx}: IPv4 header checksums must verify");
        }
        assert_clean(r, &ctx);
        let vlan = c.tunnel.vlan.map(|v| v.vid.to_string()).unwrap_or_default();
        assert_eq!(col(r, "vlan.id"), vlan, "{ctx}");
    }
    eprintln!("tshark decoded {} GTP-U packets alike", rows.len());
}

/// Our 5G and error messages as tshark reads them: a G-PDU with a PDU Session Container (QFI,
/// PDU type), ICMP Fragmentation Needed and Time Exceeded, ICMPv6 Packet Too Big, a GTP-U
/// Error Indication; checksums good, nothing malformed.
#[test]
fn tshark_decodes_our_container_icmp_errors_and_error_indication() {
    let Some(tshark) = tools::tshark() else {
        return;
    };
    let macs = (
        EthernetAddress([2, 0, 0, 0, 1, 1]),
        EthernetAddress([2, 0, 0, 0, 1, 2]),
    );
    let server4: IpAddr = Ipv4Addr::new(203, 0, 113, 5).into();
    let ue4: IpAddr = Ipv4Addr::new(10, 45, 0, 77).into();
    let server6: IpAddr = Ipv6Addr::new(0x2001, 0x4860, 0, 0, 0, 0, 0, 0x8888).into();
    let ue6: IpAddr = Ipv6Addr::new(0x2001, 0xdb8, 0x45, 0, 0, 0, 0, 0x77).into();
    let payload: Vec<u8> = (0..1400).map(|k| k as u8).collect();
    let ip4 = {
        let (p, seg) = l4_segment(server4, ue4, L4Spec::Udp(443, 50000), &payload);
        ip_packet(server4, ue4, p, &seg, &[])
    };
    let ip6 = {
        let (p, seg) = l4_segment(server6, ue6, L4Spec::Udp(443, 50000), &payload);
        ip_packet(server6, ue6, p, &seg, &[])
    };
    let outer = OuterIp::V4 {
        src: Ipv4Addr::new(192, 0, 2, 1),
        dst: Ipv4Addr::new(192, 0, 2, 200),
    };
    let mut frames = Vec::new();
    // 1, 2: G-PDUs with containers.
    for (qfi, rqi) in [(9u8, false), (63, true)] {
        let t = GtpuTunnel {
            pdu_session: Some(sb_wire::PduSession::downlink(qfi, rqi)),
            ..GtpuTunnel::new(macs.0, macs.1, outer, 0x1234)
        };
        let mut f = vec![0u8; t.header_len() + ip4.len()];
        t.encap_into(&ip4, &mut f).unwrap();
        frames.push(f);
    }
    // 3-5: ICMP errors about the IPv4 and IPv6 packets.
    let r4 = Ipv4Addr::new(10, 1, 0, 1);
    let r6 = Ipv6Addr::new(0xfd73, 0x6200, 0, 0, 0, 0, 0, 1);
    for (ip, msg) in [
        (&ip4, sb_wire::ErrorMessage::TooBig { mtu: 1456 }),
        (&ip4, sb_wire::ErrorMessage::TimeExceeded),
        (&ip6, sb_wire::ErrorMessage::TooBig { mtu: 1456 }),
    ] {
        let mut buf = vec![0u8; 128 + ip.len()];
        buf[128..].copy_from_slice(ip);
        let (s, n) = sb_wire::error_in_place(&mut buf, 128, ip.len(), r4, r6, msg).unwrap();
        let v6 = buf[s] >> 4 == 6;
        let et = if v6 { [0x86, 0xdd] } else { [0x08, 0x00] };
        let mut f = vec![2, 0, 0, 0, 1, 2, 2, 0, 0, 0, 1, 1, et[0], et[1]];
        f.extend_from_slice(&buf[s..s + n]);
        frames.push(f);
    }
    // 6: the Error Indication about a G-PDU with TEID 0xabcdef.
    let mut g = vec![0u8; 2048];
    let n = GtpuTunnel::new(macs.0, macs.1, outer, 0xab_cdef)
        .encap_into(&ip4, &mut g)
        .unwrap();
    let mut ei = vec![0u8; 256];
    let m = sb_wire::error_indication(&g[..n], &mut ei)
        .unwrap()
        .unwrap();
    ei.truncate(m);
    frames.push(ei);

    let fields = [
        "gtp.ext_hdr.pdu_ses_con.qos_flow_id",
        "gtp.ext_hdr.pdu_ses_con.pdu_type",
        "icmp.type",
        "icmp.code",
        "icmp.mtu",
        "icmp.checksum.status",
        "icmpv6.type",
        "icmpv6.mtu",
        "icmpv6.checksum.status",
        "gtp.message",
        "gtp.teid_data",
        "gtp.gsn_ipv4",
        "ip.checksum.status",
        "_ws.malformed",
    ];
    let dir = std::env::temp_dir().join(format!("sb-wire-tshark-{}-5g", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("frames.pcap");
    std::fs::write(&file, pcap(&frames)).unwrap();
    let mut cmd = Command::new(&tshark);
    cmd.args(["-n", "-r"]).arg(&file);
    cmd.args([
        "-o",
        "ip.check_checksum:TRUE",
        "-T",
        "fields",
        "-E",
        "separator=|",
    ]);
    cmd.args(["-E", "occurrence=f"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Vec<String>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), frames.len(), "{rows:?}");
    let get = |r: usize, f: &str| rows[r][fields.iter().position(|x| *x == f).unwrap()].clone();
    for (r, row) in rows.iter().enumerate() {
        assert_eq!(get(r, "_ws.malformed"), "", "frame {r}: malformed: {row:?}");
    }
    assert_eq!(get(0, "gtp.ext_hdr.pdu_ses_con.qos_flow_id"), "9");
    assert_eq!(get(0, "gtp.ext_hdr.pdu_ses_con.pdu_type"), "0");
    assert_eq!(get(1, "gtp.ext_hdr.pdu_ses_con.qos_flow_id"), "63");
    // ICMP: type, code, MTU, checksum good (status 1); ICMPv6 likewise.
    assert_eq!(
        [2, 3, 4, 5].map(|f| get(2, fields[f])),
        ["3", "4", "1456", "1"].map(String::from)
    );
    assert_eq!(
        [2, 3].map(|f| get(3, fields[f])),
        ["11", "0"].map(String::from)
    );
    assert_eq!(get(3, "icmp.checksum.status"), "1");
    assert_eq!(
        [6, 7, 8].map(|f| get(4, fields[f])),
        ["2", "1456", "1"].map(String::from)
    );
    assert_eq!(get(5, "gtp.message"), "0x1a");
    assert_eq!(get(5, "gtp.teid_data"), "0x00abcdef");
    assert_eq!(get(5, "gtp.gsn_ipv4"), "192.0.2.200");
    for r in [0, 2, 3, 5] {
        assert_eq!(get(r, "ip.checksum.status"), "1", "frame {r}");
    }
}
