//! Forwarding between two ports allocates nothing per packet: a counting global allocator.
#![allow(unsafe_code)] // the counting allocator only

use sb_io::{memory, PacketBatch, Port};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only adds a thread-local counter.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocs() -> u64 {
    COUNT.with(|c| c.get())
}

/// Moves `rounds` batches from `src` through `fwd_in` -> `fwd_out` into `dst`; returns frames.
fn forward(
    src: &mut dyn Port,
    fwd_in: &mut dyn Port,
    fwd_out: &mut dyn Port,
    dst: &mut dyn Port,
    gen: &mut PacketBatch,
    fwd: &mut PacketBatch,
    rounds: usize,
) -> u64 {
    let mut got = 0;
    for _ in 0..rounds {
        for i in 0..gen.capacity() {
            let f = gen.alloc(64 + i % 1400).unwrap();
            f[0] = i as u8;
        }
        src.tx_batch(gen);
        while fwd_in.rx_batch(fwd) > 0 {
            // Touch the frame like an engine would: rewrite the destination MAC, push a header.
            for j in 0..fwd.len() {
                fwd.get_mut(j)[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
            }
            fwd.prepend(0, 8).unwrap();
            fwd.trim_front(0, 8);
            fwd_out.tx_batch(fwd);
        }
        got += dst.rx_batch(gen) as u64;
        gen.clear();
    }
    got
}

#[test]
fn memory_forwarding_allocates_nothing_per_packet() {
    let (mut src, mut fwd_in) = memory::pair("in", 256);
    let (mut fwd_out, mut dst) = memory::pair("out", 256);
    let mut gen = PacketBatch::new(32);
    let mut fwd = PacketBatch::new(32);
    // Warm up (first use may allocate lazily inside std), then count.
    forward(
        &mut src,
        &mut fwd_in,
        &mut fwd_out,
        &mut dst,
        &mut gen,
        &mut fwd,
        4,
    );
    let before = allocs();
    let n = forward(
        &mut src,
        &mut fwd_in,
        &mut fwd_out,
        &mut dst,
        &mut gen,
        &mut fwd,
        1000,
    );
    let after = allocs();
    assert_eq!(n, 32_000);
    assert_eq!(after - before, 0, "allocations while forwarding {n} frames");
    // The counter works: an allocation is seen.
    let v = std::hint::black_box(vec![1u8; 10]);
    assert!(allocs() > after);
    drop(v);
}

#[test]
fn switch_forwarding_allocates_nothing_per_packet() {
    // Ports: 0 the source, 1 and 2 a forwarding node's two sides, 3 the sink.
    let macs = [
        [2, 0, 0, 0, 0, 10],
        [2, 0, 0, 0, 0, 11],
        [2, 0, 0, 0, 0, 12],
        [2, 0, 0, 0, 0, 1],
    ];
    let (sw, mut ports) = memory::switch("na", &macs, 256);
    let mut gen = PacketBatch::new(32);
    let mut fwd = PacketBatch::new(32);
    let mut round = |ports: &mut [memory::SwitchPort]| {
        for i in 0..gen.capacity() {
            let f = gen.alloc(64 + i % 1400).unwrap();
            // One broadcast per batch (flooded to 1, 2 and 3), the rest unicast to port 1.
            f[..6].copy_from_slice(if i == 0 { &[0xff; 6] } else { &macs[1] });
        }
        ports[0].tx_batch(&mut gen);
        // The node forwards what it receives on side 1 out of side 2 to the sink (the forward
        // helper's rewrite of the destination MAC to 02:00:00:00:00:01).
        while ports[1].rx_batch(&mut fwd) > 0 {
            for j in 0..fwd.len() {
                fwd.get_mut(j)[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
            }
            ports[2].tx_batch(&mut fwd);
        }
        fwd.clear();
        while ports[2].rx_batch(&mut fwd) > 0 {
            fwd.clear();
        }
        let mut got = 0;
        while ports[3].rx_batch(&mut gen) > 0 {
            got += gen.len() as u64;
            gen.clear();
        }
        got
    };
    for _ in 0..4 {
        round(&mut ports);
    }
    let before = allocs();
    let mut n = 0;
    for _ in 0..1000 {
        n += round(&mut ports);
    }
    let after = allocs();
    // 32 forwarded + 1 flooded directly to the sink per round.
    assert_eq!(n, 33_000);
    assert_eq!(after - before, 0, "allocations while switching {n} frames");
    assert_eq!(sw.stats().queue_full, 0);
}

#[test]
fn afpacket_forwarding_allocates_nothing_per_packet() {
    use sb_io::afpacket::{AfPacketConfig, AfPacketPort, TxMode};
    use sb_io::netns::{self, Netns};
    if !sb_io::netns::root_or_skip("needs network namespaces") {
        return;
    }
    let pid = std::process::id();
    let g = Netns::create(&format!("sbio-na-g-{pid}")).unwrap();
    let f = Netns::create(&format!("sbio-na-f-{pid}")).unwrap();
    let s = Netns::create(&format!("sbio-na-s-{pid}")).unwrap();
    netns::veth_pair(g.name(), "g0", f.name(), "a").unwrap();
    netns::veth_pair(f.name(), "b", s.name(), "s0").unwrap();
    for mode in [TxMode::Sendmmsg, TxMode::Ring] {
        let cfg = AfPacketConfig {
            tx_mode: mode,
            promiscuous: true,
            ..AfPacketConfig::default()
        };
        let open =
            |ns: &Netns, dev: &str| ns.run(|| AfPacketPort::open(dev, &cfg)).unwrap().unwrap();
        let (mut src, mut fa, mut fb, mut dst) =
            (open(&g, "g0"), open(&f, "a"), open(&f, "b"), open(&s, "s0"));
        let mut gen = PacketBatch::new(32);
        let mut fwd = PacketBatch::new(32);
        // Small batches keep the rings far from full; block timeout delays are waited out.
        let mut run = |rounds: usize| {
            let mut got = 0;
            for _ in 0..rounds {
                got += forward(&mut src, &mut fa, &mut fb, &mut dst, &mut gen, &mut fwd, 1);
            }
            got
        };
        run(8);
        let before = allocs();
        let n = run(300);
        let after = allocs();
        assert!(n > 0, "no frame made it through ({mode:?})");
        assert_eq!(
            after - before,
            0,
            "allocations while forwarding over AF_PACKET ({mode:?})"
        );
    }
}

#[cfg(feature = "xdp")]
#[test]
fn xdp_forwarding_allocates_nothing_per_packet() {
    use sb_io::afpacket::{AfPacketConfig, AfPacketPort};
    use sb_io::netns::{self, Netns};
    use sb_io::xdp::{XdpConfig, XdpPort};
    if !sb_io::netns::root_or_skip("needs network namespaces") {
        return;
    }
    let pid = std::process::id();
    let g = Netns::create(&format!("sbio-nx-g-{pid}")).unwrap();
    let f = Netns::create(&format!("sbio-nx-f-{pid}")).unwrap();
    let s = Netns::create(&format!("sbio-nx-s-{pid}")).unwrap();
    netns::veth_pair(g.name(), "g0", f.name(), "a").unwrap();
    netns::veth_pair(f.name(), "b", s.name(), "s0").unwrap();
    let cfg = AfPacketConfig::default();
    let xcfg = XdpConfig::default();
    let mut src = g.run(|| AfPacketPort::open("g0", &cfg)).unwrap().unwrap();
    let mut dst = s.run(|| AfPacketPort::open("s0", &cfg)).unwrap().unwrap();
    let mut fa = f.run(|| XdpPort::open("a", &xcfg)).unwrap().unwrap();
    let mut fb = f.run(|| XdpPort::open("b", &xcfg)).unwrap().unwrap();
    let mut gen = PacketBatch::new(32);
    let mut fwd = PacketBatch::new(32);
    let mut run = |rounds: usize| {
        let mut got = 0;
        for _ in 0..rounds {
            got += forward(&mut src, &mut fa, &mut fb, &mut dst, &mut gen, &mut fwd, 1);
        }
        got
    };
    run(8);
    let before = allocs();
    let n = run(300);
    let after = allocs();
    assert!(n > 0, "no frame made it through");
    assert_eq!(
        after - before,
        0,
        "allocations while forwarding over AF_XDP"
    );
}
