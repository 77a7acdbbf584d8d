//! Timing of build, lookups and updates on random 13-byte keys (the size of an IPv4 5-tuple).
//!
//! `cargo bench -p sb-setsep --bench setsep -- [KEYS] [VALUE_BITS] [CONFIG] [BATCH] [what]`
//! (defaults: 4194304 2 16+8 32 all); `what` is a comma list of `build1`, `build2`, `lookup`,
//! `update`, `kernel`, or `all`. Prints one line per measurement, with rates per wall second and
//! per CPU second (getrusage), since the machine may be shared.
#![allow(unsafe_code)]

use sb_common::splitmix64 as splitmix;
use sb_setsep::{BuildOptions, Config, Kernel, SetSep, Updatable};
use std::hint::black_box;
use std::time::Instant;

/// CPU seconds (user + system) used by the whole process so far, threads that have exited
/// included.
fn cpu_secs() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a rusage into the pointer we pass; it is valid and large enough.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } == 0;
    if !ok {
        return 0.0;
    }
    // SAFETY: getrusage succeeded and initialised the struct (it was zeroed before anyway).
    let ru = unsafe { ru.assume_init() };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Runs `f`, returns (wall seconds, cpu seconds).
fn timed(f: impl FnOnce()) -> (f64, f64) {
    let c0 = cpu_secs();
    let t0 = Instant::now();
    f();
    (t0.elapsed().as_secs_f64(), cpu_secs() - c0)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let n: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(1 << 22);
    let vbits: u8 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let config: Config = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(Config::C16_8);
    let batch: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(32);
    let what = args.get(4).cloned().unwrap_or_else(|| "all".into());
    let want = |w: &str| what == "all" || what.split(',').any(|x| x == w);

    let mut s = 42u64;
    let raw: Vec<[u8; 13]> = (0..n)
        .map(|_| {
            let a = splitmix(&mut s).to_le_bytes();
            let b = splitmix(&mut s).to_le_bytes();
            let mut k = [0u8; 13];
            k[..8].copy_from_slice(&a);
            k[8..].copy_from_slice(&b[..5]);
            k
        })
        .collect();
    let keys: Vec<&[u8]> = raw.iter().map(|k| k.as_slice()).collect();
    let mask = ((1u32 << vbits) - 1) as u16;
    let values: Vec<u16> = (0..n).map(|_| splitmix(&mut s) as u16 & mask).collect();
    println!(
        "keys {n} value_bits {vbits} config {config} batch {batch} avx2 {}",
        Kernel::avx2_available()
    );

    let mut opts = BuildOptions {
        config,
        value_bits: vbits,
        threads: 1,
        seed: 0x5eed_5e75_e900_0001,
        build_id: 1,
        ..BuildOptions::default()
    };
    if let Some(r) = std::env::var("SB_RUNS").ok().and_then(|r| r.parse().ok()) {
        opts.runs = r;
    }
    let t0 = Instant::now();
    let c0 = cpu_secs();
    let table = SetSep::build(&keys, &values, &opts).expect("build");
    let d1 = t0.elapsed().as_secs_f64();
    let cpu1 = cpu_secs() - c0;
    if want("build1") || want("build2") {
        println!(
            "build threads=1: {:.3} s wall, {:.2} M keys/s wall; {:.3} s cpu, {:.2} M keys/s per cpu-second",
            d1,
            n as f64 / d1 / 1e6,
            cpu1,
            n as f64 / cpu1 / 1e6
        );
    }
    let st = table.stats();
    println!(
        "bits/key {:.4} fallback_keys {} ({:.5}%) fallback_groups {} bytes {} pages {}",
        st.bits_per_key,
        st.fallback_keys,
        st.fallback_keys as f64 * 100.0 / n as f64,
        st.fallback_groups,
        st.bytes,
        st.page_info.label()
    );
    if want("build2") {
        opts.threads = 2;
        let mut t2 = None;
        let (d2, cpu2) = timed(|| t2 = Some(SetSep::build(&keys, &values, &opts).expect("build")));
        println!(
            "build threads=2: {:.3} s wall, {:.2} M keys/s wall, speedup {:.2}x wall; {:.3} cpu-s in all threads ({:.2}x the 1-thread cpu-s); identical {}",
            d2,
            n as f64 / d2 / 1e6,
            d1 / d2,
            cpu2,
            cpu2 / cpu1,
            t2.expect("built").to_bytes() == table.to_bytes()
        );
        opts.threads = 1;
    }
    if want("lookup") {
        // Check, then time (best of 3; rates per wall second and per cpu second).
        let mut out = vec![0u16; n];
        table.lookup_batch(&keys, &mut out);
        assert_eq!(out, values, "batched lookups wrong");
        let (mut sw, mut sc, mut bw, mut bc) = (0f64, 0f64, 0f64, 0f64);
        for _ in 0..3 {
            let (w, c) = timed(|| {
                let mut acc = 0u64;
                for k in &keys {
                    acc += table.lookup(black_box(k)) as u64;
                }
                black_box(acc);
            });
            sw = sw.max(n as f64 / w / 1e6);
            sc = sc.max(n as f64 / c / 1e6);
            let (w, c) = timed(|| {
                for (kc, oc) in keys.chunks(batch).zip(out.chunks_mut(batch)) {
                    table.lookup_batch(black_box(kc), oc);
                }
                black_box(&out);
            });
            bw = bw.max(n as f64 / w / 1e6);
            bc = bc.max(n as f64 / c / 1e6);
        }
        println!(
            "lookup single {sw:.1} Mops wall ({sc:.1} per cpu-s), batched({batch}) {bw:.1} Mops wall ({bc:.1} per cpu-s), ratio {:.2}x",
            bc / sc
        );
    }
    if want("kernel") {
        for (n, vb) in [(16usize, 1u32), (16, 2), (12, 2), (20, 2)] {
            for (name, k) in [("avx2", Kernel::Auto), ("scalar", Kernel::Scalar)] {
                let groups = if k == Kernel::Scalar { 300 } else { 20000 };
                let mut cands = 0;
                let (w, c) = timed(|| {
                    cands = sb_setsep::bench_search(config, k, n, vb, groups);
                });
                println!(
                    "kernel {name} n={n} vbits={vb}: {:.0} candidates/group, {:.2} ns/candidate ({:.2} cpu), {:.2} us/group (cpu)",
                    cands as f64 / groups as f64,
                    w * 1e9 / cands as f64,
                    c * 1e9 / cands as f64,
                    c * 1e6 / groups as f64
                );
            }
        }
    }
    if want("update") {
        let mut up = Updatable::build(&keys, &values, &opts).expect("build");
        let m: usize = std::env::var("SB_UPDATES")
            .ok()
            .and_then(|x| x.parse().ok())
            .unwrap_or(200_000);
        let mut bytes = 0usize;
        let (du, cu) = timed(|| {
            for i in 0..m {
                let k = keys[(splitmix(&mut s) % n as u64) as usize];
                let v = (i as u16 + 1) & mask;
                let d = up.insert(k, v).expect("update");
                bytes += d.to_bytes().len();
            }
        });
        println!(
            "update (value change) {:.0} K/s wall ({:.0} K per cpu-s), mean delta {:.1} bytes, fallback keys {}",
            m as f64 / du / 1e3,
            m as f64 / cu / 1e3,
            bytes as f64 / m as f64,
            up.table().stats().fallback_keys
        );
    }
}
