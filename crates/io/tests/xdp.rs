//! AF_XDP copy-mode ports over a veth pair between two namespaces (feature `xdp`, root only).
#![cfg(feature = "xdp")]

use sb_io::afpacket::{AfPacketConfig, AfPacketPort};
use sb_io::netns::{self, Netns};
use sb_io::xdp::{redirect_to, SlowPathPort, XdpConfig, XdpMode, XdpPort};
use sb_io::{PacketBatch, Port};
use std::time::{Duration, Instant};

fn frame(seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xbb]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xaa]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[18..].iter_mut().enumerate() {
        *b = (seq as usize * 7 + i) as u8;
    }
    f
}

/// Sends N frames from `tx` to `rx` with at most 256 in flight; checks order and contents.
fn transfer(tx: &mut dyn Port, rx: &mut dyn Port, n: u32) {
    let sizes = [60usize, 128, 1514];
    let mut out = PacketBatch::new(64);
    let mut inb = PacketBatch::new(64);
    let (mut next, mut got) = (0u32, 0u32);
    let deadline = Instant::now() + Duration::from_secs(20);
    while got < n {
        assert!(
            Instant::now() < deadline,
            "timed out: received {got} of {n}"
        );
        while next < n && next - got < 256 && !out.is_full() {
            out.push(&frame(next, sizes[next as usize % 3]));
            next += 1;
        }
        let k = out.len();
        if k > 0 {
            assert_eq!(tx.tx_batch(&mut out), k);
        }
        rx.wait_rx(Duration::from_millis(5)).unwrap();
        inb.clear();
        rx.rx_batch(&mut inb);
        for f in inb.iter() {
            assert_eq!(
                f,
                frame(got, sizes[got as usize % 3]).as_slice(),
                "frame {got}"
            );
            got += 1;
        }
    }
}

fn promiscuous() -> AfPacketConfig {
    AfPacketConfig {
        promiscuous: true,
        ..AfPacketConfig::default()
    }
}

/// Namespaces `sbio-{tag}-a/b-PID` joined by veths `va`/`vb`, and an AF_PACKET port on `va`.
fn pair(tag: &str) -> (Netns, Netns, AfPacketPort) {
    let pid = std::process::id();
    let na = Netns::create(&format!("sbio-{tag}-a-{pid}")).unwrap();
    let nb = Netns::create(&format!("sbio-{tag}-b-{pid}")).unwrap();
    netns::veth_pair(na.name(), "va", nb.name(), "vb").unwrap();
    let a = na
        .run(|| AfPacketPort::open("va", &promiscuous()))
        .unwrap()
        .unwrap();
    (na, nb, a)
}

#[test]
fn xdp_copy_mode_over_veth() {
    if !sb_io::netns::root_or_skip("needs network namespaces") {
        return;
    }
    for mode in [XdpMode::Generic, XdpMode::Auto] {
        let tag = if mode == XdpMode::Generic { "xg" } else { "xd" };
        let (_na, nb, mut a) = pair(tag);
        let xcfg = XdpConfig {
            mode,
            ..XdpConfig::default()
        };
        let mut x = nb.run(|| XdpPort::open("vb", &xcfg)).unwrap().unwrap();
        eprintln!("xdp program mode: {:?}", x.mode());
        assert!(x.mode().is_some());
        transfer(&mut a, &mut x, 3000);
        transfer(&mut x, &mut a, 3000);
        let s = x.stats();
        assert_eq!(s.rx_packets, 3000);
        assert_eq!(s.tx_packets, 3000);
        assert_eq!(s.rx_dropped, 0);
        drop(x);
        drop(a);
    }
}

/// Issue 30's slow path: a `SlowPathPort` receives over AF_PACKET what goes up the kernel's
/// path (no program attached yet), over AF_XDP what a program redirects into its socket, and
/// transmits through AF_PACKET; its counters tell the two apart.
#[test]
fn a_slow_path_port_takes_redirected_frames_over_af_xdp_and_the_rest_over_af_packet() {
    if !sb_io::netns::root_or_skip("needs network namespaces") {
        return;
    }
    let (_na, nb, mut a) = pair("sp");
    let xcfg = XdpConfig {
        frames: 1024,
        frame_size: 4096,
        ring_size: 512,
        ..XdpConfig::default()
    };
    let mut s = nb
        .run(|| SlowPathPort::open("vb", &xcfg, &promiscuous()))
        .unwrap()
        .unwrap();
    transfer(&mut a, &mut s, 300);
    assert_eq!(s.received(), (0, 300));
    let fd = s.xsk_fd();
    let prog = nb
        .run(|| redirect_to("vb", 0, fd, XdpMode::Generic))
        .unwrap()
        .unwrap();
    transfer(&mut a, &mut s, 3000);
    assert_eq!(s.received(), (3000, 300));
    transfer(&mut s, &mut a, 3000);
    let st = s.stats();
    assert_eq!(
        (st.rx_packets, st.rx_af_xdp, st.tx_packets),
        (3300, 3000, 3000)
    );
    assert_eq!(st.rx_dropped, 0);
    drop(prog);
}
