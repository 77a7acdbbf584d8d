//! The XDP program against the Rust engine and the Rust GPT, through `BPF_PROG_TEST_RUN`
//! (feature `bpf`, root). Skips with a notice without them; under `CI=true` a skip fails.

#[cfg(not(feature = "bpf"))]
#[test]
fn bpf_tests_need_the_feature() {
    sb_io::netns::skip_or_fail(
        "sb-xdp BPF tests",
        "the `bpf` feature is off (cargo test -p sb-xdp --features bpf; needs clang: scripts/install-bpf-tools.sh)",
    );
}

#[cfg(feature = "bpf")]
mod bpf {
    use sb_common::{hash128, splitmix64};
    use sb_engine::cluster::{self, sim_mac, sim_ran_addr};
    use sb_engine::lte::{self, Lte, Tunnel};
    use sb_engine::{Arch, Engine, Outputs, PortId};
    use sb_io::PacketBatch;
    use sb_setsep::{BuildOptions, SetSep, Updatable};
    use sb_wire::{EthernetAddress, GtpuTunnel, OuterIp, PacketBuilder, PduSession};
    use sb_xdp::{action, Counter, FastPath, GptImage, NodeSetup, Prog};
    use std::collections::VecDeque;
    use std::net::{IpAddr, Ipv4Addr};

    const NODES: u16 = 4;
    const ME: u16 = 1;
    const SEED: u64 = 0x005e_ed0f_0ca1;

    fn may_run(what: &str) -> bool {
        match sb_xdp::root_and_bpf() {
            Ok(()) => true,
            Err(why) => sb_io::netns::skip_or_fail(what, &why),
        }
    }

    fn setup() -> NodeSetup {
        NodeSetup {
            node: ME,
            fabric_macs: (0..NODES)
                .map(|n| sim_mac(PortId::Fabric, n, false))
                .collect(),
            ran_addrs: (0..NODES).map(sim_ran_addr).collect(),
            ran_mtu: 1500,
            inet_mac: sim_mac(PortId::Inet, ME, false),
            inet_peer: sim_mac(PortId::Inet, ME, true),
            ran_mac: sim_mac(PortId::Ran, ME, false),
            ran_peer: sim_mac(PortId::Ran, ME, true),
            ifindex_inet: 1,
            ifindex_ran: 1,
            ifindex_fabric: 1,
        }
    }

    /// Tunnels of every kind the engine distinguishes: LTE bearers, 5G flows with a QFI (and
    /// RQI), separate uplink TEIDs, entries with a local policy slot, without a downlink
    /// tunnel (eNodeB 0.0.0.0), and IPv6 UEs.
    fn tunnels() -> Vec<Tunnel> {
        let mut ts = cluster::generate_tunnels(4000, NODES.into(), 7, 9);
        for (i, t) in ts.iter_mut().enumerate() {
            match i % 7 {
                1 => {
                    t.qfi = 1 + (i % 63) as u8;
                    t.rqi = i % 2 == 0;
                }
                2 => t.ul_teid = 0x0100_0000 + i as u32,
                5 if i % 3 == 0 => t.enb = Ipv4Addr::UNSPECIFIED,
                _ => {}
            }
        }
        ts
    }

    /// Tunnels whose node-1 FIB value carries a local policy slot (the slow path's).
    fn has_slot(i: usize) -> bool {
        i % 11 == 3
    }

    fn value_of(ts: &[Tunnel], t: &Tunnel) -> [u8; 32] {
        let i = ts.iter().position(|x| x == t).unwrap();
        let mut v = t.value();
        if has_slot(i) {
            lte::set_local_slot(&mut v, 1 + i as u32);
        }
        v
    }

    struct Rig {
        ts: Vec<Tunnel>,
        engine: Engine<Lte>,
        fp: FastPath,
        out: Outputs,
        rx: PacketBatch,
        slow: u64,
        fast: u64,
        echoes: u64,
    }

    fn rig() -> Rig {
        rig_for(Arch::ScaleBricks)
    }

    /// The engine of node `ME` and its fast path under `arch`: the FIB (engine and map) is
    /// what the node holds under it (`cluster::fib_slice`: its slice, every entry, its hash
    /// slice), the GPT only under ScaleBricks.
    fn rig_for(arch: Arch) -> Rig {
        rig_with(arch, &[])
    }

    /// [`rig_for`] with stand-ins: the engine's GPT is a live one redirecting each node `n` to
    /// `stand_ins[n]` where it is `Some`, and the fast path's `sb_nodes` say the same.
    fn rig_with(arch: Arch, stand_ins: &[Option<u16>]) -> Rig {
        let ts = tunnels();
        let gpt = cluster::build_gpt(&ts, NODES.into(), SEED, 1).unwrap();
        let fib = cluster::build_cuckoo_fib_with(arch, &ts, ME, NODES, SEED, |t| value_of(&ts, t))
            .unwrap();
        let mine: Vec<(usize, &Tunnel)> = ts
            .iter()
            .enumerate()
            .filter(|(_, t)| t.node == ME)
            .collect();
        let ups: Vec<([u8; 4], [u8; 24])> = mine
            .iter()
            .map(|&(i, t)| {
                let (k, mut v) = t.uplink_entry();
                if has_slot(i) {
                    lte::set_uplink_slot(&mut v, 1 + i as u32);
                }
                (k, v)
            })
            .collect();
        let up = sb_engine::fib::cuckoo_table(
            4,
            lte::UPLINK_VALUE_BYTES,
            SEED,
            ups.iter().map(|(k, v)| (&k[..], &v[..])),
        )
        .unwrap()
        .into_concurrent()
        .1;
        let engine = cluster::sim_engine(
            arch,
            ME,
            NODES,
            SEED,
            (arch == Arch::ScaleBricks).then(|| {
                if stand_ins.is_empty() {
                    sb_engine::Gpt::from(gpt.clone())
                } else {
                    let live = std::sync::Arc::new(sb_setsep::LiveSetSep::new(gpt.clone()));
                    live.set_redirects(stand_ins);
                    sb_engine::Gpt::from(live)
                }
            }),
            Box::new(fib),
            up,
            64,
        )
        .unwrap();
        let (xarch, image) = match arch {
            Arch::ScaleBricks => (sb_xdp::Arch::ScaleBricks, GptImage::of(&gpt).unwrap()),
            Arch::FullDup => (sb_xdp::Arch::FullDup, GptImage::none(SEED)),
            Arch::HashPart => (sb_xdp::Arch::HashPart, GptImage::none(SEED)),
        };
        assert_eq!(xarch.label(), arch.label());
        let mut fp = FastPath::load_arch(xarch, setup(), image, 8192, 8192).unwrap();
        fp.set_stand_ins(stand_ins).unwrap();
        for i in cluster::fib_slice(arch, &ts, ME, NODES, SEED) {
            fp.fib_insert(&ts[i].key(), &value_of(&ts, &ts[i])).unwrap();
        }
        for (k, v) in &ups {
            fp.uplink_insert(k, v).unwrap();
        }
        Rig {
            ts,
            engine,
            fp,
            out: Outputs::new(64, sb_io::batch::DEFAULT_BUF_SIZE),
            rx: PacketBatch::new(64),
            slow: 0,
            fast: 0,
            echoes: 0,
        }
    }

    impl Rig {
        /// One frame through both: the program's redirect must be the engine's output, byte
        /// for byte and port for port; a pass is the slow path (the engine's to answer).
        fn check(&mut self, port: PortId, frame: &[u8]) {
            if frame.len() < 14 {
                return; // BPF_PROG_TEST_RUN takes no frame shorter than Ethernet
            }
            let prog = match port {
                PortId::Inet => Prog::Inet,
                PortId::Ran => Prog::Ran,
                PortId::Fabric => Prog::Fabric,
            };
            let before = self.fp.counters().unwrap();
            let crossings = self.engine.counters().crossings;
            let r = self.fp.test_run(prog, frame).unwrap();
            let after = self.fp.counters().unwrap();
            let d = |c: Counter| after[c as usize] - before[c as usize];
            self.out.inet.clear();
            self.out.ran.clear();
            self.out.fabric.clear();
            assert!(self.rx.push(frame));
            self.engine.process(port, &mut self.rx, &mut self.out);
            self.rx.clear();
            let host = port == PortId::Fabric && frame[12..14] != [0x88, 0xb5];
            match r.action {
                action::PASS if host => {
                    // The node's own traffic on the fabric (no shim): the kernel's, not
                    // counted; the engine drops it.
                    assert_eq!(after, before, "a host frame counted: {frame:02x?}");
                    let total = self.out.ran.len() + self.out.fabric.len() + self.out.inet.len();
                    assert_eq!(total, 0, "the engine sent a host frame on: {frame:02x?}");
                    self.slow += 1;
                }
                _ if host => panic!("XDP action {} for a host frame {frame:02x?}", r.action),
                action::PASS => {
                    assert_eq!(
                        d(Counter::Slow),
                        1,
                        "a pass is counted as slow: {frame:02x?}"
                    );
                    self.slow += 1;
                }
                action::REDIRECT => {
                    // Frames out of ran: the engine counts them in the same crossings
                    // bucket as the program's counter says (to_ran: none; fabric_to_ran:
                    // one; fabric_to_ran_2: two).
                    let hops = [Counter::ToRan, Counter::FabricToRan, Counter::FabricToRan2]
                        .iter()
                        .position(|&c| d(c) == 1);
                    if let Some(h) = hops {
                        let now = self.engine.counters().crossings;
                        assert_eq!(
                            now[h],
                            crossings[h] + 1,
                            "XDP counted {h} crossings, the engine {:?} -> {now:?}: {frame:02x?}",
                            crossings
                        );
                    }
                    if d(Counter::Echo) == 1 {
                        // A GTP-U Echo Request answered in place: the engine's reply, out of
                        // ran (redirected to the port it came in on).
                        let total =
                            self.out.ran.len() + self.out.fabric.len() + self.out.inet.len();
                        assert!(
                            port == PortId::Ran && self.out.ran.len() == 1 && total == 1,
                            "XDP answered, the engine sent {} to ran, {} to fabric, {} to inet: {frame:02x?}",
                            self.out.ran.len(),
                            self.out.fabric.len(),
                            self.out.inet.len()
                        );
                        assert_eq!(
                            r.frame,
                            self.out.ran.get(0),
                            "echo: XDP's answer (left) differs from the engine's, input {frame:02x?}"
                        );
                        self.fast += 1;
                        self.echoes += 1;
                        return;
                    }
                    let (to, name) = if hops.is_some() {
                        (&self.out.ran, "ran")
                    } else if d(Counter::ToFabric) == 1 {
                        (&self.out.fabric, "fabric")
                    } else if d(Counter::UpToInet) == 1 {
                        (&self.out.inet, "inet")
                    } else {
                        panic!("a redirect without its counter: {frame:02x?}");
                    };
                    let total = self.out.ran.len() + self.out.fabric.len() + self.out.inet.len();
                    assert!(
                        to.len() == 1 && total == 1,
                        "XDP sent to {name}, the engine sent {} to ran, {} to fabric, {} to inet: {frame:02x?}",
                        self.out.ran.len(),
                        self.out.fabric.len(),
                        self.out.inet.len()
                    );
                    assert_eq!(
                        r.frame,
                        to.get(0),
                        "to {name}: XDP's frame (left) differs from the engine's, input {frame:02x?}"
                    );
                    self.fast += 1;
                }
                a => panic!("XDP action {a} for {frame:02x?}"),
            }
        }
    }

    fn mac(p: PortId, n: u16, peer: bool) -> EthernetAddress {
        EthernetAddress(sim_mac(p, n, peer))
    }

    fn down(ue: IpAddr, ttl: u8, payload: usize, tcp: bool) -> Vec<u8> {
        down_at(ME, ue, ttl, payload, tcp)
    }

    /// A downlink frame at node `node`'s `inet`.
    fn down_at(node: u16, ue: IpAddr, ttl: u8, payload: usize, tcp: bool) -> Vec<u8> {
        let mut f = cluster::sim_downstream_frame(ue, node, ttl, &vec![0xa5; payload]);
        if tcp {
            let server: IpAddr = Ipv4Addr::new(198, 51, 100, 7).into();
            let b = PacketBuilder {
                ttl,
                l4: sb_wire::L4Header::Tcp {
                    src_port: 443,
                    dst_port: 40000,
                    seq_number: 1,
                    ack_number: 2,
                    flags: sb_wire::TcpFlags::ACK,
                    window: 1000,
                },
                ..PacketBuilder::udp(
                    mac(PortId::Inet, node, true),
                    mac(PortId::Inet, node, false),
                    server,
                    ue,
                    0,
                    0,
                )
            };
            let mut out = vec![0u8; b.header_len() + payload];
            let n = b.build(&vec![7; payload], &mut out).unwrap();
            out.truncate(n);
            f = out;
        }
        f
    }

    /// An uplink G-PDU from the UE of `t` on TEID `teid`.
    fn up(t: &Tunnel, teid: u32, src: IpAddr, ttl: u8, payload: usize, qfi: Option<u8>) -> Vec<u8> {
        let server: IpAddr = Ipv4Addr::new(203, 0, 113, 9).into();
        let b = PacketBuilder {
            ttl,
            ..PacketBuilder::udp(
                mac(PortId::Ran, ME, true),
                mac(PortId::Ran, ME, false),
                src,
                server,
                5000,
                443,
            )
        };
        let mut inner = vec![0u8; b.header_len() + payload];
        let n = b.build(&vec![0x3c; payload], &mut inner).unwrap();
        let ip = &inner[14..n];
        let tun = GtpuTunnel {
            pdu_session: qfi.map(|q| PduSession {
                pdu_type: PduSession::UL,
                qfi: q,
                rqi: false,
            }),
            ..GtpuTunnel::new(
                mac(PortId::Ran, ME, false),
                mac(PortId::Ran, ME, true),
                OuterIp::V4 {
                    src: t.enb,
                    dst: sim_ran_addr(ME),
                },
                teid,
            )
        };
        let mut out = vec![0u8; tun.header_len() + ip.len()];
        let n = tun.encap_into(ip, &mut out).unwrap();
        out.truncate(n);
        out
    }

    /// A GTP-U Echo Request to this node's `ran` address from `enb`, UDP source port `sport`,
    /// with GTP-U `flags` (0x30: no sequence number; 0x32: `seq`; others as given) and `tail`
    /// after the mandatory header and the optional word (IEs).
    fn echo_request(enb: Ipv4Addr, sport: u16, flags: u8, seq: u16, tail: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::udp(
            mac(PortId::Ran, ME, false),
            mac(PortId::Ran, ME, true),
            enb.into(),
            sim_ran_addr(ME).into(),
            sport,
            2152,
        );
        let mut g = vec![flags, 1, 0, 0, 0, 0, 0, 0];
        if flags & 7 != 0 {
            g.extend_from_slice(&[(seq >> 8) as u8, seq as u8, 0, 0]);
        }
        g.extend_from_slice(tail);
        let glen = (g.len() - 8) as u16;
        g[2..4].copy_from_slice(&glen.to_be_bytes());
        let mut out = vec![0u8; b.header_len() + g.len()];
        let n = b.build(&g, &mut out).unwrap();
        out.truncate(n);
        out
    }

    /// Variants of a frame: truncated at several lengths, padded, and with random bytes
    /// changed (each variant goes through both sides).
    fn variants(f: &[u8], rng: &mut u64) -> Vec<Vec<u8>> {
        let mut v = vec![f.to_vec()];
        for cut in [14, 20, 33, 34, 41, 42, 49, 50, 53, 61] {
            if cut < f.len() {
                v.push(f[..cut].to_vec());
            }
        }
        v.push(f[..f.len() - 1].to_vec());
        let mut p = f.to_vec();
        p.extend_from_slice(&[0; 7]);
        v.push(p);
        for _ in 0..12 {
            let mut m = f.to_vec();
            let r = splitmix64(rng);
            let at = (r as usize) % m.len().min(80);
            m[at] ^= 1 << ((r >> 32) % 8);
            if r >> 40 & 1 == 1 {
                let at2 = (r >> 44) as usize % m.len().min(80);
                m[at2] = (r >> 56) as u8;
            }
            v.push(m);
        }
        v
    }

    #[test]
    fn downlink_matches_the_engine() {
        if !may_run("XDP downlink differential") {
            return;
        }
        let mut r = rig();
        let mut rng = 1u64;
        let ts = r.ts.clone();
        let mut frames = Vec::new();
        for (i, t) in ts.iter().enumerate().step_by(3) {
            let payload = [0usize, 18, 100, 1400, 1444, 1445, 1452, 1453, 1472][i % 9];
            frames.push(down(t.ue, 64, payload, false));
            if i % 5 == 0 {
                frames.push(down(t.ue, 2, 30, i % 2 == 0));
                frames.push(down(t.ue, 1, 30, false));
                frames.push(down(t.ue, 64, 60, true));
            }
        }
        // Unknown UEs (the GPT answers some node for them).
        for i in 0..500u32 {
            let a = Ipv4Addr::from(0x0a00_0000 | splitmix64(&mut rng) as u32 & 0xff_ffff ^ i);
            frames.push(down(a.into(), 64, 18, false));
        }
        // Group destinations, ARP, a VLAN tag, ICMP.
        let t0 = ts[0].ue;
        frames.push(down(Ipv4Addr::new(224, 0, 0, 5).into(), 64, 18, false));
        frames.push(down(Ipv4Addr::BROADCAST.into(), 64, 18, false));
        let mut bc = down(t0, 64, 18, false);
        bc[..6].fill(0xff);
        frames.push(bc);
        let mut arp = vec![0xffu8; 6];
        arp.extend_from_slice(&sim_mac(PortId::Inet, ME, true));
        arp.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
        arp.extend_from_slice(&[0; 28]);
        frames.push(arp);
        let mut icmp = down(t0, 64, 30, false);
        icmp[14 + 9] = 1;
        frames.push(icmp);
        let mut total = 0;
        for f in &frames {
            for v in variants(f, &mut rng) {
                r.check(PortId::Inet, &v);
                total += 1;
            }
        }
        // Random bytes after a valid Ethernet/IPv4 start.
        for _ in 0..2000 {
            let mut f = down(ts[(rng % 4000) as usize].ue, 64, 18, false);
            let at = 14 + (splitmix64(&mut rng) as usize % (f.len() - 14));
            for b in &mut f[at..] {
                *b = splitmix64(&mut rng) as u8;
            }
            r.check(PortId::Inet, &f);
            total += 1;
        }
        eprintln!(
            "downlink: {total} frames, {} forwarded by XDP (byte-equal to the engine), {} to the slow path",
            r.fast, r.slow
        );
        let c = r.fp.counters().unwrap();
        for k in Counter::ALL {
            eprintln!("  {:>18} {}", k.label(), c[k as usize]);
        }
        assert!(c[Counter::ToRan as usize] > 300 && c[Counter::ToFabric as usize] > 1000);
        assert!(c[Counter::SlowPolicy as usize] > 0 && c[Counter::SlowMtu as usize] > 0);
    }

    /// Stand-ins (issue 29): with node 2 gone and node 3 standing in for it, and node 0 gone
    /// with this node standing in, the program's downlink is the engine's (whose live GPT
    /// redirects the same), byte for byte: node 2's flows cross the fabric to node 3's MAC,
    /// node 0's are looked up here. A stand-in outside the cluster is refused.
    #[test]
    fn downlink_with_stand_ins_matches_the_engine() {
        if !may_run("XDP downlink with stand-ins") {
            return;
        }
        let by = [Some(ME), None, Some(3), None];
        let mut r = rig_with(Arch::ScaleBricks, &by);
        let ts = r.ts.clone();
        let gpt = cluster::build_gpt(&ts, NODES.into(), SEED, 1).unwrap();
        let (mut to_two, mut to_zero) = (0, 0);
        for t in &ts {
            let f = down(t.ue, 64, 100, false);
            r.check(PortId::Inet, &f);
            match gpt.lookup(&t.key()) {
                2 => {
                    // Those XDP forwards (not passed to the slow path) go to node 3's MAC.
                    let out = r.fp.test_run(Prog::Inet, &f).unwrap();
                    if out.action == action::REDIRECT {
                        to_two += 1;
                        assert_eq!(
                            &out.frame[..6],
                            &sim_mac(PortId::Fabric, 3, false)[..],
                            "not to the stand-in's MAC"
                        );
                    }
                }
                0 => to_zero += 1,
                _ => {}
            }
        }
        assert!(to_two > 100 && to_zero > 100, "{to_two} {to_zero}");
        eprintln!(
            "stand-ins: {} frames, {} forwarded by XDP (byte-equal to the engine), {} to the slow path",
            ts.len(),
            r.fast,
            r.slow
        );
        assert!(r.fp.set_stand_ins(&[Some(NODES)]).is_err());
        r.fp.set_stand_ins(&[]).unwrap();
    }

    /// Removing an entry the maps do not hold is no error (aya reports the kernel's ENOENT for
    /// it): the node's mirror removes a TEID whenever the table lacks it, held or not, and an
    /// error turned the fast path off (pfcp_e2e on XDP found it).
    #[test]
    fn removing_an_absent_entry_is_not_an_error() {
        if !may_run("XDP removals of absent entries") {
            return;
        }
        let mut r = rig();
        r.fp.fib_remove(&[0xee; 16]).unwrap();
        r.fp.uplink_remove(&[0xee; 4]).unwrap();
        // And a present one goes.
        let t = *r.ts.iter().find(|t| t.node == ME).unwrap();
        let (teid, _) = t.uplink_entry();
        r.fp.uplink_remove(&teid).unwrap();
        r.fp.uplink_remove(&teid).unwrap();
        r.fp.fib_remove(&t.key()).unwrap();
        r.fp.fib_remove(&t.key()).unwrap();
        assert!(r.fp.enabled());
    }

    #[test]
    fn uplink_matches_the_engine() {
        if !may_run("XDP uplink differential") {
            return;
        }
        let mut r = rig();
        let mut rng = 2u64;
        let ts = r.ts.clone();
        let mut frames = Vec::new();
        for (i, t) in ts
            .iter()
            .enumerate()
            .filter(|(_, t)| t.node == ME && t.ue.is_ipv4())
        {
            let teid = t.uplink_teid();
            let payload = [0usize, 18, 100, 1400][i % 4];
            frames.push(up(t, teid, t.ue, 64, payload, None));
            if i % 4 == 0 {
                frames.push(up(t, teid, t.ue, 1, 20, None));
                frames.push(up(t, teid ^ 0x5a5a, t.ue, 64, 20, None));
                frames.push(up(
                    t,
                    teid,
                    Ipv4Addr::new(100, 64, 9, 9).into(),
                    64,
                    20,
                    None,
                ));
                frames.push(up(t, teid, t.ue, 64, 20, Some(t.qfi.max(1))));
            }
        }
        // GTP-U Echo Requests: with and without a sequence number, with a Recovery IE, with
        // an N-PDU number or an extension header (the slow path's), from port 2152 or another.
        for (i, t) in ts.iter().enumerate().take(400) {
            let enb = if t.enb.is_unspecified() {
                Ipv4Addr::new(10, 2, 0, 9)
            } else {
                t.enb
            };
            let sport = if i % 3 == 0 { 2152 } else { 30000 + i as u16 };
            let seq = (i as u16).wrapping_mul(2477);
            frames.push(match i % 5 {
                0 => echo_request(enb, sport, 0x30, 0, &[]),
                1 => echo_request(enb, sport, 0x32, seq, &[]),
                2 => echo_request(enb, sport, 0x32, seq, &[14, 3]),
                3 => echo_request(enb, sport, 0x33, seq, &[14, 3]),
                _ => echo_request(enb, sport, 0x34, seq, &[1, 0, 0, 0]),
            });
        }
        let mut total = 0;
        for f in &frames {
            for v in variants(f, &mut rng) {
                r.check(PortId::Ran, &v);
                total += 1;
            }
        }
        eprintln!(
            "uplink: {total} frames, {} forwarded or answered by XDP (byte-equal to the engine; {} echo answers), {} to the slow path",
            r.fast, r.echoes, r.slow
        );
        let c = r.fp.counters().unwrap();
        for k in Counter::ALL {
            eprintln!("  {:>18} {}", k.label(), c[k as usize]);
        }
        assert!(c[Counter::UpToInet as usize] > 200);
        assert!(r.echoes > 200, "{} echo answers", r.echoes);
        assert!(c[Counter::SlowTeidMiss as usize] > 0 && c[Counter::SlowUplinkCheck as usize] > 0);
    }

    /// What the other nodes' engines send over the fabric to `ME` under `arch` when downlink
    /// frames (to known and unknown UEs, of several sizes and TTLs) enter their `inet`
    /// ports: under hash partitioning frames that went through a third node (its indirection
    /// step) too, with two crossings. Also a few frames addressed to other nodes (which `ME`
    /// leaves to the slow path). The engines hold the tables the cluster gives them.
    fn fabric_corpus(arch: Arch, ts: &[Tunnel], rng: &mut u64) -> Vec<Vec<u8>> {
        let gpt = (arch == Arch::ScaleBricks)
            .then(|| sb_engine::Gpt::from(cluster::build_gpt(ts, NODES.into(), SEED, 1).unwrap()));
        let mut engines: Vec<Option<Engine<Lte>>> = (0..NODES)
            .map(|n| {
                (n != ME).then(|| {
                    let fib = cluster::build_cuckoo_fib_with(arch, ts, n, NODES, SEED, |t| {
                        value_of(ts, t)
                    })
                    .unwrap();
                    let up = Lte::uplink_table(ts.iter().filter(|t| t.node == n), SEED).unwrap();
                    cluster::sim_engine(arch, n, NODES, SEED, gpt.clone(), Box::new(fib), up, 64)
                        .unwrap()
                })
            })
            .collect();
        let mut work: VecDeque<(u16, PortId, Vec<u8>)> = VecDeque::new();
        for (i, t) in ts.iter().enumerate().step_by(3) {
            let from = [0u16, 2, 3][i % 3];
            let payload = [0usize, 18, 100, 1400, 1428, 1436, 1437][i % 7];
            work.push_back((
                from,
                PortId::Inet,
                down_at(from, t.ue, 64, payload, i % 4 == 0 && t.ue.is_ipv4()),
            ));
            if i % 9 == 0 {
                work.push_back((from, PortId::Inet, down_at(from, t.ue, 2, 30, false)));
            }
        }
        for i in 0..300u32 {
            let a = Ipv4Addr::from(0x0a00_0000 | splitmix64(rng) as u32 & 0xff_ffff ^ i);
            let from = [0u16, 2, 3][i as usize % 3];
            work.push_back((from, PortId::Inet, down_at(from, a.into(), 64, 18, false)));
        }
        let me = sim_mac(PortId::Fabric, ME, false);
        let (mut corpus, mut others) = (Vec::new(), 0);
        let mut out = Outputs::new(64, sb_io::batch::DEFAULT_BUF_SIZE);
        let mut rx = PacketBatch::new(64);
        while let Some((n, port, f)) = work.pop_front() {
            assert!(rx.push(&f));
            out.inet.clear();
            out.ran.clear();
            out.fabric.clear();
            engines[usize::from(n)]
                .as_mut()
                .unwrap()
                .process(port, &mut rx, &mut out);
            rx.clear();
            for f in out.fabric.iter() {
                if f[..6] == me {
                    corpus.push(f.to_vec());
                    continue;
                }
                let to = (0..NODES)
                    .find(|&k| f[..6] == sim_mac(PortId::Fabric, k, false))
                    .expect("a node's fabric MAC");
                if others < 40 {
                    others += 1;
                    corpus.push(f.to_vec());
                }
                work.push_back((to, PortId::Fabric, f.to_vec()));
            }
        }
        corpus
    }

    /// A fabric frame's shim changed: `(byte, value)`.
    fn reshim(f: &[u8], at: usize, v: u8) -> Vec<u8> {
        let mut g = f.to_vec();
        g[at] = v;
        g
    }

    /// Node `ME` under `arch`, its programs against its engine: downlink frames at `inet`
    /// (handled here, by another node, unknown), and at `fabric` what the other nodes send it
    /// (and those frames' variants: truncated, padded, bits flipped, the shim's kind, hops,
    /// version and ingress changed). Returns the program counters.
    fn differential(arch: Arch) -> [u64; Counter::COUNT] {
        let mut r = rig_for(arch);
        let mut rng = 3u64;
        let ts = r.ts.clone();
        let mut frames = Vec::new();
        for (i, t) in ts.iter().enumerate().step_by(4) {
            let payload = [0usize, 18, 100, 1400, 1444, 1445, 1452, 1453, 1472][i % 9];
            frames.push(down(t.ue, 64, payload, i % 6 == 0 && t.ue.is_ipv4()));
            if i % 10 == 0 {
                frames.push(down(t.ue, 2, 30, false));
                frames.push(down(t.ue, 1, 30, false));
            }
        }
        for i in 0..300u32 {
            let a = Ipv4Addr::from(0x0a00_0000 | splitmix64(&mut rng) as u32 & 0xff_ffff ^ i);
            frames.push(down(a.into(), 64, 18, false));
        }
        let (mut inet, mut fabric) = (0, 0);
        for f in &frames {
            for v in variants(f, &mut rng) {
                r.check(PortId::Inet, &v);
                inet += 1;
            }
        }
        let mut corpus = fabric_corpus(arch, &ts, &mut rng);
        // The node's own traffic on the fabric: ARP, IP to its address.
        let mut arp = vec![0xffu8; 6];
        arp.extend_from_slice(&sim_mac(PortId::Fabric, 0, false));
        arp.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
        arp.extend_from_slice(&[0; 28]);
        corpus.push(arp);
        let mut ip = down(ts[0].ue, 64, 40, false);
        ip[..6].copy_from_slice(&sim_mac(PortId::Fabric, ME, false));
        corpus.push(ip);
        assert!(corpus.len() > 400, "{} fabric frames", corpus.len());
        for (i, f) in corpus.iter().enumerate() {
            let mut vs = variants(f, &mut rng);
            if i % 4 == 0 {
                for (at, v) in [
                    (14, 0x11),
                    (14, 0x12),
                    (14, 0x13),
                    (14, 0x21),
                    (15, 0),
                    (15, 1),
                    (15, 2),
                    (15, 3),
                    (16, 1),
                    (17, NODES as u8),
                    (17, 0),
                ] {
                    vs.push(reshim(f, at, v));
                }
            }
            for v in vs {
                r.check(PortId::Fabric, &v);
                fabric += 1;
            }
        }
        eprintln!(
            "{arch}: {inet} frames at inet, {fabric} at fabric ({} from the other nodes' engines); {} forwarded by XDP (byte-equal to the engine), {} to the slow path",
            corpus.len(),
            r.fast,
            r.slow
        );
        let c = r.fp.counters().unwrap();
        for k in Counter::ALL {
            eprintln!("  {:>18} {}", k.label(), c[k as usize]);
        }
        c
    }

    #[test]
    fn scalebricks_fabric_matches_the_engine() {
        if !may_run("XDP ScaleBricks fabric differential") {
            return;
        }
        let c = differential(Arch::ScaleBricks);
        assert!(c[Counter::ToRan as usize] > 100 && c[Counter::ToFabric as usize] > 300);
        assert!(c[Counter::FabricToRan as usize] > 300);
        assert_eq!(c[Counter::FabricToRan2 as usize], 0);
        assert!(c[Counter::SlowPolicy as usize] > 0 && c[Counter::SlowFibMiss as usize] > 0);
    }

    #[test]
    fn full_duplication_matches_the_engine() {
        if !may_run("XDP full duplication differential") {
            return;
        }
        let c = differential(Arch::FullDup);
        // Looked up at ingress: out of ran here, or encapsulated to the egress node, which
        // transmits what the others encapsulated.
        assert!(c[Counter::ToRan as usize] > 100 && c[Counter::ToFabric as usize] > 300);
        assert!(c[Counter::FabricToRan as usize] > 300);
        assert_eq!(c[Counter::FabricToRan2 as usize], 0);
        assert_eq!(
            c[Counter::SlowGpt as usize] + c[Counter::SlowRetry as usize],
            0
        );
        assert!(c[Counter::SlowPolicy as usize] > 0 && c[Counter::SlowFibMiss as usize] > 0);
        assert!(c[Counter::SlowMtu as usize] > 0);
    }

    #[test]
    fn hash_partitioning_matches_the_engine() {
        if !may_run("XDP hash partitioning differential") {
            return;
        }
        let c = differential(Arch::HashPart);
        // Out of ran after zero, one and two crossings; over the fabric to indirection
        // nodes (Lookup) and egress nodes (Transmit, from inet and from fabric).
        assert!(c[Counter::ToRan as usize] > 20 && c[Counter::ToFabric as usize] > 300);
        assert!(c[Counter::FabricToRan as usize] > 100 && c[Counter::FabricToRan2 as usize] > 100);
        assert_eq!(
            c[Counter::SlowGpt as usize] + c[Counter::SlowRetry as usize],
            0
        );
        assert!(c[Counter::SlowPolicy as usize] > 0 && c[Counter::SlowFibMiss as usize] > 0);
    }

    /// `n` distinct keys: a third IPv4-mapped, the rest random 16 bytes.
    fn keys(n: usize, salt: u64) -> Vec<[u8; 16]> {
        let mut s = salt;
        let mut seen = std::collections::HashSet::new();
        (0..n * 2)
            .map(|i| {
                let mut k = [0u8; 16];
                if i % 3 == 0 {
                    k[10] = 0xff;
                    k[11] = 0xff;
                    k[12..].copy_from_slice(&(splitmix64(&mut s) as u32).to_be_bytes());
                } else {
                    k[..8].copy_from_slice(&splitmix64(&mut s).to_le_bytes());
                    k[8..].copy_from_slice(&splitmix64(&mut s).to_le_bytes());
                }
                k
            })
            .filter(|k| seen.insert(*k))
            .take(n)
            .collect()
    }

    /// Runs the GPT test program over `ks` (64 keys a run); the answers.
    fn bpf_gpt(fp: &FastPath, ks: &[[u8; 16]]) -> Vec<u16> {
        let mut out = Vec::with_capacity(ks.len());
        for c in ks.chunks(64) {
            let data: Vec<u8> = c.iter().flatten().copied().collect();
            let r = fp.test_run(Prog::TestGpt, &data).unwrap();
            for i in 0..c.len() {
                out.push(u16::from_le_bytes([r.frame[16 * i], r.frame[16 * i + 1]]));
            }
        }
        out
    }

    #[test]
    fn hash_and_gpt_match_rust() {
        if !may_run("XDP hash and GPT") {
            return;
        }
        // A table with fallback groups: 8+8 with 4-bit values sends some groups there.
        let n = 200_000;
        let ks = keys(n, 9);
        let vals: Vec<u16> = (0..n)
            .map(|i| (splitmix64(&mut (i as u64)) % 16) as u16)
            .collect();
        let refs: Vec<&[u8]> = ks.iter().map(|k| &k[..]).collect();
        for (config, bits) in [
            (sb_setsep::Config::C16_8, 2u8),
            (
                sb_setsep::Config {
                    index_bits: 8,
                    array_bits: 8,
                },
                4,
            ),
        ] {
            let opts = BuildOptions {
                config,
                value_bits: bits,
                seed: SEED,
                threads: 1,
                ..BuildOptions::default()
            };
            let vs: Vec<u16> = vals.iter().map(|v| v % (1 << bits)).collect();
            let t = SetSep::build(&refs, &vs, &opts).unwrap();
            let img = GptImage::of(&t).unwrap();
            let fb = img.fallback.len();
            let s = NodeSetup {
                fabric_macs: vec![[2; 6]; 16],
                ran_addrs: vec![Ipv4Addr::LOCALHOST; 16],
                ..setup()
            };
            let fp = FastPath::load(s, img, 16, 16).unwrap();
            // The hash: every key of the table and random ones.
            for c in ks.chunks(64).take(1000) {
                let data: Vec<u8> = c.iter().flatten().copied().collect();
                let r = fp.test_run(Prog::TestHash, &data).unwrap();
                for (i, k) in c.iter().enumerate() {
                    let h = hash128(k, SEED);
                    let got = &r.frame[16 * i..16 * i + 16];
                    assert_eq!(got[..8], h.lo.to_le_bytes(), "hash lo of {k:02x?}");
                    assert_eq!(got[8..], h.hi.to_le_bytes(), "hash hi of {k:02x?}");
                }
            }
            // The GPT: the keys held in (fallback keys included) and 1M random keys.
            let got = bpf_gpt(&fp, &ks);
            for (i, k) in ks.iter().enumerate() {
                assert_eq!(got[i], vs[i], "held-in key {k:02x?}");
            }
            let random = keys(1_000_000, 0xabc ^ u64::from(bits));
            let got = bpf_gpt(&fp, &random);
            for (k, g) in random.iter().zip(got) {
                assert_eq!(g, t.lookup(k), "random key {k:02x?}");
            }
            eprintln!(
                "{config:?} {bits} bits: {n} held-in keys ({fb} in the fallback table) and 1,000,000 random keys answer as sb-setsep"
            );
            if bits == 4 {
                assert!(fb > 0, "the 8+8 table was meant to have fallback keys");
            }
        }
    }

    /// The writer under readers: two tables over the same keys (values A and B), the writer
    /// rewrites every block from one to the other over and over while test runs look keys up;
    /// every answer must be A's or B's value, or the slow path (a retry).
    #[test]
    fn writer_never_shows_half_a_block() {
        if !may_run("XDP GPT writer stress") {
            return;
        }
        let n = 50_000;
        let ks = keys(n, 5);
        let refs: Vec<&[u8]> = ks.iter().map(|k| &k[..]).collect();
        let opts = BuildOptions {
            value_bits: 8,
            seed: SEED,
            threads: 1,
            capacity: n as u64 * 2,
            ..BuildOptions::default()
        };
        let va: Vec<u16> = (0..n).map(|i| (i % 251) as u16).collect();
        let mut u = Updatable::build(&refs, &va, &opts).unwrap();
        let a = GptImage::of(u.table()).unwrap();
        // B: every key's value changed through deltas (the control plane's path).
        let vb: Vec<u16> = (0..n).map(|i| ((i * 7 + 100) % 251) as u16).collect();
        let mut edits = Vec::new();
        let mut img = a.clone();
        for (k, &v) in ks.iter().zip(&vb) {
            let d = u.insert(k, v).unwrap();
            let e = sb_xdp::BlockEdit::of(&d, &img).unwrap();
            e.apply_to(&mut img);
            edits.push(e);
        }
        let b = GptImage::of(u.table()).unwrap();
        let s = NodeSetup {
            fabric_macs: vec![[2; 6]; 256],
            ran_addrs: vec![Ipv4Addr::LOCALHOST; 256],
            ..setup()
        };
        // Test runs and block writes both take &FastPath: they run at the same time.
        let fp = std::sync::Arc::new(FastPath::load(s, a.clone(), 16, 16).unwrap());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (fp, stop) = (fp.clone(), stop.clone());
            let (a, b) = (a.clone(), b.clone());
            std::thread::spawn(move || {
                let mut rounds = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let to = if rounds.is_multiple_of(2) { &b } else { &a };
                    for blk in 0..to.n_blocks {
                        fp.write_block(to, blk).unwrap();
                    }
                    rounds += 1;
                }
                rounds
            })
        };
        let (mut seen, mut retries, mut mixed) = (0u64, 0u64, 0u64);
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_secs(4) {
            let got = bpf_gpt(&fp, &ks[..640]);
            for (i, &g) in got.iter().enumerate() {
                seen += 1;
                if g == 0xfffe {
                    retries += 1;
                } else if g != va[i] && g != vb[i] {
                    mixed += 1;
                }
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let rounds = writer.join().unwrap();
        eprintln!("writer: {rounds} rewrites of the table; readers: {seen} lookups, {retries} sent to the slow path, {mixed} mixed");
        assert_eq!(mixed, 0);
        assert!(rounds >= 2);
        // The deltas' edits leave the maps equal to B.
        let mut g = std::sync::Arc::into_inner(fp).expect("the writer is done");
        g.load_gpt(a.clone()).unwrap();
        for e in &edits {
            g.apply_edit(e).unwrap();
        }
        let got = bpf_gpt(&g, &ks);
        assert_eq!(got, vb);
    }
}
