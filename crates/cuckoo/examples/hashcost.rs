//! Nanoseconds per `hash128` of a 13-byte key and per single lookup in a cache-resident table.
use sb_cuckoo::{CuckooTable, Params};
/// CPU time of this thread in ns (the machine is shared: wall time is not ours alone).
struct Instant(u64);
impl Instant {
    fn now() -> Self {
        Instant(cpu_ns())
    }
    fn elapsed(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(cpu_ns() - self.0)
    }
}
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0)
}

fn main() {
    let keys: Vec<[u8; 13]> = (0..1024u32)
        .map(|i| {
            let mut k = [7u8; 13];
            k[..4].copy_from_slice(&i.wrapping_mul(2654435761).to_le_bytes());
            k
        })
        .collect();
    let n = 20_000_000;
    let t = Instant::now();
    let mut acc = 0u64;
    for i in 0..n {
        acc ^= sb_common::hash128(&keys[i & 1023], 0).lo;
    }
    println!(
        "hash128: {:.2} ns ({acc})",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    let mut tb = CuckooTable::new(Params::fast(13, 16, 2048).with_seed(0)).unwrap();
    for k in &keys {
        tb.insert(k, &[1u8; 16]).unwrap();
    }
    let mut out = [0u8; 16];
    let t = Instant::now();
    let mut hits = 0;
    for i in 0..n {
        hits += tb.lookup_into(&keys[i & 1023], &mut out) as usize;
    }
    println!(
        "lookup_into: {:.2} ns ({hits})",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    let hs: Vec<_> = keys.iter().map(|k| tb.hash(k)).collect();
    let t = Instant::now();
    for i in 0..n {
        hits += tb.lookup_with_hash(&keys[i & 1023], hs[i & 1023], &mut out) as usize;
    }
    println!(
        "lookup_with_hash: {:.2} ns ({hits})",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    let flat = keys.concat();
    let mut vals = vec![0u8; 1024 * 16];
    let mut found = vec![false; 1024];
    let t = Instant::now();
    for _ in 0..n / 1024 {
        hits += tb.lookup_batch(&flat, &mut vals, &mut found);
    }
    println!(
        "lookup_batch: {:.2} ns/key ({hits})",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    let t = Instant::now();
    for _ in 0..n / 1024 {
        hits += tb.lookup_batch_hashes(&flat, &hs, &mut vals, &mut found);
    }
    println!(
        "lookup_batch_hashes: {:.2} ns/key ({hits})",
        t.elapsed().as_nanos() as f64 / n as f64
    );
}
