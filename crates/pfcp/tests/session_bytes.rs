//! What the endpoint keeps per installed session: heap bytes counted by a global allocator
//! while 50,000 sessions are established (the endpoint's response cache is off, so what is
//! left is the sessions' own state).
#![allow(unsafe_code)] // The counting allocator: it only forwards to the system's.

use sb_pfcp::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

/// The system allocator, counting the bytes it holds.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call forwards to `System` with the caller's arguments.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as given.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as given.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The tests count one process-wide allocator: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A cluster that installs everything at once.
struct Installs;

impl Sessions for Installs {
    fn place(&mut self, _: &[IpAddr]) -> Result<Placement, Failure> {
        Ok(Placement {
            node: 1,
            ran: Ipv4Addr::new(10, 1, 0, 2),
        })
    }
    fn apply(&mut self, _: Token, _: &[FibChange], _: &[UeChange]) -> Result<Applied, Failure> {
        Ok(Applied::Done)
    }
}

/// Our load generator's session (`smf::establishment`: two PDRs, two FARs), 50,000 times. The
/// bound: the session kept as its differences from the first one (~20 bytes of its ~140 packed
/// with short IE headers and a byte for its placement) in a pool of records of its length, its
/// slot in the session slab (8 bytes), the UE address index (8-byte entries) and the TEID
/// bitmap. Decoded sessions took 914 bytes; packed with 4-byte headers, 301; with short
/// headers and the CP SEID kept beside the packed bytes, 243; read from them, 222; kept as
/// differences, 103; with one-byte run headers, 98; with the 12-byte UE index entries and the
/// TEID bitmap, 77; with the placement in the kept allocation, 68; in the slab (no map from
/// SEIDs, no allocation per session), 49; with the UE index holding slab slots, 44.
#[test]
fn an_installed_session_keeps_under_60_bytes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let smf = Ipv4Addr::new(10, 3, 0, 254);
    let from = SocketAddr::new(IpAddr::V4(smf), 8805);
    let addr = Ipv4Addr::new(10, 0, 0, 1);
    let mut cfg = Config::new(NodeId::Ipv4(addr), RecoveryTimeStamp(1), addr);
    cfg.response_cache_entries = 0;
    cfg.response_ttl = Duration::ZERO;
    let mut upf = Upf::new(cfg, Installs);
    let setup = smf::association_setup(1, smf, 5).to_bytes().unwrap();
    assert_eq!(upf.handle(Duration::ZERO, from, &setup).len(), 1);
    let n = 50_000u32;
    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..n {
        let ue = IpAddr::V4(Ipv4Addr::from(0x0a80_0000 + i));
        let enb = Ipv4Addr::new(10, 2, 0, 1);
        let m = smf::establishment(i + 2, smf, u64::from(i), ue, i + 1, enb);
        let out = upf.handle(Duration::from_millis(1), from, &m.to_bytes().unwrap());
        let reply = Message::parse(&out[0].bytes).unwrap();
        let Body::SessionEstablishmentResponse(r) = reply.body else {
            panic!("{reply:?}")
        };
        assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    }
    assert_eq!(upf.session_count(), n as usize);
    let per = (LIVE.load(Ordering::Relaxed) - before) / n as isize;
    eprintln!("{per} heap bytes per installed session");
    assert!(per < 60, "{per} heap bytes per installed session");
    // They still read back: every session forwards what it was given.
    for seid in upf.session_ids().collect::<Vec<_>>() {
        let (fwd, place) = upf.session(seid).unwrap();
        assert_eq!(
            (fwd.downlink.len(), fwd.uplink.len(), place.node),
            (1, 1, 1)
        );
    }
}

/// open5gs's session (`smf::establishment_open5gs`: four PDRs, three FARs (the downlink one
/// BUFF|NOCP with a BAR), a URR with a volume threshold, a QER), 50,000 times: the heap bytes
/// per installed session, and [`Upf::memory`]'s count of them by structure (printed:
/// `cargo test -p sb-pfcp --test session_bytes -- --nocapture`). Every such session is
/// metered (its URR): the usage state is most of what it keeps beyond the minimal session.
/// 2,246 bytes (usage state 1,493: its map's entries of 353 bytes, the meters in a vector of
/// room for four; CP-function paths ~680: a vector per path and per filter list, each with
/// room for four); with the usage state boxed and its meters' vector exact, 861 (usage 570,
/// CP paths 237).
#[test]
fn an_open5gs_session_keeps_under_900_bytes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let smf = Ipv4Addr::new(10, 3, 0, 254);
    let from = SocketAddr::new(IpAddr::V4(smf), 8805);
    let addr = Ipv4Addr::new(10, 0, 0, 1);
    let mut cfg = Config::new(NodeId::Ipv4(addr), RecoveryTimeStamp(1), addr);
    cfg.response_cache_entries = 0;
    cfg.response_ttl = Duration::ZERO;
    let mut upf = Upf::new(cfg, Installs);
    let setup = smf::association_setup(1, smf, 5).to_bytes().unwrap();
    assert_eq!(upf.handle(Duration::ZERO, from, &setup).len(), 1);
    let n = 50_000u32;
    let before = LIVE.load(Ordering::Relaxed);
    let mem0 = upf.memory();
    for i in 0..n {
        let ue = Ipv4Addr::from(0x0a80_0000 + i);
        let m = smf::establishment_open5gs(i + 2, smf, u64::from(i) + 1, ue);
        let out = upf.handle(Duration::from_millis(1), from, &m);
        let reply = Message::parse(&out[0].bytes).unwrap();
        let Body::SessionEstablishmentResponse(r) = reply.body else {
            panic!("{reply:?}")
        };
        assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    }
    assert_eq!(upf.session_count(), n as usize);
    let per = (LIVE.load(Ordering::Relaxed) - before) / n as isize;
    let m = upf.memory();
    let p = |a: usize, b: usize| a.saturating_sub(b) / n as usize;
    eprintln!(
        "open5gs: {per} heap bytes per installed session; Upf::memory per session: sessions {} \
         packed {} packed_chunks {} ue_index {} teids {} responses {} shapes {} usage {} cp {}",
        p(m.sessions, mem0.sessions),
        p(m.packed, mem0.packed),
        p(m.packed_chunks, mem0.packed_chunks),
        p(m.ue_index, mem0.ue_index),
        p(m.teids, mem0.teids),
        p(m.responses, mem0.responses),
        p(m.shapes, mem0.shapes),
        p(m.usage, mem0.usage),
        p(m.cp, mem0.cp),
    );
    assert!(per < 900, "{per} heap bytes per installed session");
    // What `Upf::memory` counts is what the allocator holds, within 5%.
    let counted = [
        m.sessions - mem0.sessions,
        m.packed - mem0.packed,
        m.packed_chunks - mem0.packed_chunks,
        m.ue_index - mem0.ue_index,
        m.teids - mem0.teids,
        m.usage - mem0.usage,
        m.cp - mem0.cp,
    ]
    .iter()
    .sum::<usize>() as f64
        / n as f64;
    let ratio = counted / per as f64;
    assert!((0.95..1.05).contains(&ratio), "counted {counted} of {per}");
}
