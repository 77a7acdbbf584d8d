//! What a replica pays per delta: builds an owner ([`Updatable`]) of N random 13-byte keys
//! with 2-bit values (config 8+16 by default, which keeps 1-2% of the keys in the fallback
//! table), makes U value changes, then times [`SetSep::apply_delta`] of every delta on a
//! replica loaded from the owner's image, separately for deltas that touch the fallback table
//! and those that do not (wall time per apply: `Instant` costs tens of ns, reading this
//! thread's CPU time from /proc costs microseconds).
//!
//! `cargo run --release -p sb-setsep --example applycost -- [N] [U] [CONFIG]`
use sb_setsep::{BuildOptions, Config, SetSep, Updatable};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    let nu: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let config: Config = args
        .next()
        .map(|s| s.parse().expect("config X+Y"))
        .unwrap_or(Config::C8_16);
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let arena: Vec<u8> = (0..n * 13).map(|_| rnd() as u8).collect();
    let keys: Vec<&[u8]> = arena.chunks_exact(13).collect();
    let values: Vec<u16> = (0..n).map(|_| (rnd() & 3) as u16).collect();
    let opts = BuildOptions {
        config,
        value_bits: 2,
        threads: 1,
        seed: 0x5eed_5e75_e900_0001,
        build_id: 1,
        ..BuildOptions::default()
    };
    let mut owner = Updatable::build(&keys, &values, &opts).expect("build");
    let mut replica = SetSep::from_bytes(&owner.table().to_bytes()).expect("load");
    let deltas: Vec<_> = (0..nu)
        .map(|_| {
            let i = (rnd() % n as u64) as usize;
            let v = (values[i] ^ (1 + (rnd() % 3) as u16)) & 3;
            owner.insert(keys[i], v).expect("insert")
        })
        .collect();
    let (mut fb_ns, mut fb_n, mut other_ns, mut other_n) = (0u64, 0u64, 0u64, 0u64);
    for d in &deltas {
        let t = std::time::Instant::now();
        replica.apply_delta(d).expect("apply");
        let el = t.elapsed().as_nanos() as u64;
        if d.touches_fallback() {
            fb_ns += el;
            fb_n += 1;
        } else {
            other_ns += el;
            other_n += 1;
        }
    }
    assert_eq!(replica.to_bytes(), owner.table().to_bytes());
    let st = replica.stats();
    println!(
        "{n} keys, {config}, 2-bit values, {} fallback keys; {nu} deltas applied on a replica",
        st.fallback_keys
    );
    println!(
        "fallback deltas: {fb_n}, {:.2} us per apply; other deltas: {other_n}, {:.3} us per apply; \
         fallback share of apply time {:.0}%",
        fb_ns as f64 / fb_n.max(1) as f64 / 1e3,
        other_ns as f64 / other_n.max(1) as f64 / 1e3,
        100.0 * fb_ns as f64 / (fb_ns + other_ns).max(1) as f64
    );
}
