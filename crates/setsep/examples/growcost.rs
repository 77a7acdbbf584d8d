//! Growth by inserts alone: builds an owner ([`Updatable`]) of N random 13-byte keys with 2-bit
//! values (16+8), inserts new random keys up to TARGET, and every STEP inserts prints keys,
//! blocks, fallback keys (% of keys), bits/key and the insert rate of that step (CPU time of
//! this thread, growth rebuilds included, statistics sampling after every 4096 inserts
//! excluded). With `grow` the owner grows
//! ([`Updatable::with_growth`]); without it the table keeps its blocks (today's behaviour).
//!
//! `cargo run --release -p sb-setsep --example growcost -- [N] [TARGET] [STEP] [grow]`
use sb_setsep::{BuildOptions, Config, Updatable};

fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    let target: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8 << 20);
    let step: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1 << 19);
    let grow = args.next().as_deref() == Some("grow");
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let arena: Vec<u8> = (0..target * 13).map(|_| rnd() as u8).collect();
    let keys: Vec<&[u8]> = arena.chunks_exact(13).collect();
    let values: Vec<u16> = (0..target).map(|_| (rnd() & 3) as u16).collect();
    let opts = BuildOptions {
        config: Config::C16_8,
        value_bits: 2,
        threads: 1,
        seed: 0x5eed_5e75_e900_0001,
        build_id: 1,
        ..BuildOptions::default()
    };
    let mut u = Updatable::build(&keys[..n], &values[..n], &opts).expect("build");
    if grow {
        u = u.with_growth(sb_setsep::Growth::default());
    }
    let report = |u: &Updatable, rate: f64| {
        let st = u.table().stats();
        println!(
            "keys {:>9} blocks {:>6} fallback {:>6} ({:.4}%) bits/key {:.3} inserts {:.1} K/s",
            st.keys,
            st.blocks,
            st.fallback_keys,
            100.0 * st.fallback_keys as f64 / st.keys as f64,
            st.bits_per_key,
            rate
        );
    };
    report(&u, 0.0);
    let (mut worst_fb, mut worst_bits) = (0f64, 0f64);
    let mut i = n;
    while i < target {
        let end = (i + step).min(target);
        let mut ns = 0u64;
        for c in (i..end).step_by(4096) {
            let t = cpu_ns();
            for j in c..(c + 4096).min(end) {
                std::hint::black_box(u.insert(keys[j], values[j]).expect("insert"));
            }
            ns += cpu_ns() - t;
            // Sampled outside the timed inserts (stats reads /proc for the page size).
            let st = u.table().stats();
            worst_fb = worst_fb.max(st.fallback_keys as f64 / st.keys as f64);
            worst_bits = worst_bits.max(st.bits_per_key);
        }
        let el = ns as f64 / 1e9;
        report(&u, (end - i) as f64 / el / 1e3);
        i = end;
    }
    println!(
        "worst over the run (sampled every 4096 inserts): fallback {:.4}% of keys, {:.3} bits/key",
        100.0 * worst_fb,
        worst_bits
    );
}
