//! `scalebricks-bench gpt`: SetSep against DPDK EFD, `sux` VFunc, `ptr_hash` + packed values and
//! `hashbrown`, all built on the same random keys in one process, one JSON object out.
//!
//! Method, identical for every structure:
//! - keys: `--keys` distinct random byte strings of `--key-bytes` bytes (distinct by
//!   construction: their first 8 (or 4) bytes are a bijection of the key's index), values
//!   uniform in `[0, 2^V)`;
//! - build: the structure's own construction from all keys (EFD and hashbrown: one insert per
//!   key), timed, with `--threads` threads where the structure builds in parallel;
//! - check: every key is looked up singly and in batches and compared with its true value; a
//!   structure with any wrong answer is reported `"correct": false` with the count, and its
//!   rates are not reported (null);
//! - lookups: one thread, the keys in one random permutation (the same for all; copied
//!   contiguously in that order, as packet headers arrive, so no structure pays a cache miss to
//!   read a key's bytes), one key at a time ("single") and through the structure's batch API in batches of `--batch` keys
//!   ("batched"; a structure without one loops over single lookups, and says so), repeated over
//!   the permutation until at least `MIN_TIMED_S` has passed;
//! - updates: `--updates` changes of the value of random existing keys (the same sequence for
//!   all, the keys' bytes again contiguous in update order), for the structures that can be
//!   updated.
//!
//! Each SetSep row is followed by a `setsep-CONFIG-live` row: the same table as a
//! [`LiveSetSep`] (what the engine's workers read while deltas are applied), measured the same
//! way. Both rows also give `lookup_mops_batched_hashes`: `lookup_batch_hashes` over the keys'
//! precomputed hashes in lookup order (what the engine calls), the two tables timed
//! alternately, three times each, the median kept.
//!
//! With `--grow FROM:TO` it runs instead the growth benchmark of `grow`: one SetSep owner
//! growing by inserts from FROM to TO keys, a row per doubling (insert rate, bits/key,
//! fallback, bytes sent to replicas per inserted key).
//!
//! Progress goes to stderr; stdout carries only the JSON.

use std::hint::black_box;
use std::time::Instant;

use anyhow::{bail, Context};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use sb_common::pages::MapSnapshot;
use sb_setsep::{BuildOptions, Config, LiveSetSep, SetSep, Updatable};
use serde::Serialize;

mod grow;
mod peers;
use peers::Lookup;

/// Lookup passes repeat until at least this many seconds have passed.
const MIN_TIMED_S: f64 = 0.5;

#[derive(clap::Args)]
pub struct Args {
    /// Number of keys.
    #[arg(long, required_unless_present = "grow")]
    keys: Option<usize>,
    /// Bits of each value (1 to 16).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=16))]
    value_bits: u32,
    /// Build threads for the structures that build in parallel (SetSep, sux, ptr_hash hashing).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Keys per batched lookup call.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Structures to run (comma separated): setsep, dpdk-efd, sux-vfunc, ptr_hash, hashbrown.
    #[arg(long, default_value = "setsep,dpdk-efd,sux-vfunc,ptr_hash,hashbrown")]
    peers: String,
    /// SetSep configurations (comma separated), one row each.
    #[arg(long, default_value = "16+8")]
    configs: String,
    /// Bytes of each key (4 to 64; 13 = an IPv4 5-tuple).
    #[arg(long, default_value_t = 13)]
    key_bytes: usize,
    /// Seed of the keys, values, lookup order, updates and randomized builds.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Value changes timed per updatable structure (capped at the number of keys).
    #[arg(long, default_value_t = 200_000)]
    updates: usize,
    /// Instead of the comparison: a growing SetSep owner built from FROM keys is given keys
    /// up to TO by inserts (`--batch` per call), one row per doubling (`gpt/grow.rs` says what
    /// each field counts). Uses the first of `--configs`.
    #[arg(long, value_name = "FROM:TO", conflicts_with_all = ["keys", "peers", "updates"])]
    grow: Option<String>,
    /// Print the JSON object (otherwise a table).
    #[arg(long)]
    json: bool,
    /// Pages: `2m` (SetSep's arrays advised for 2 MB pages; DPDK EFD on 2 MB hugepages when
    /// reserved and mounted, see scripts/hugepages.sh) or `4k` (the control: SetSep's arrays
    /// `MADV_NOHUGEPAGE`, DPDK `--no-huge`). Every row's `page_size` is measured either way.
    #[arg(long, value_enum, default_value_t = crate::pages::Pages::TwoM)]
    pages: crate::pages::Pages,
}

/// One result row; the field names are the JSON's.
#[derive(Serialize, Default, Clone, Debug)]
struct Row {
    name: String,
    build_mkeys_per_s: Option<f64>,
    build_threads: usize,
    bits_per_key: Option<f64>,
    lookup_mops_single: Option<f64>,
    lookup_mops_batched: Option<f64>,
    /// SetSep rows: `lookup_batch_hashes` over precomputed hashes, in batches of `--batch`.
    #[serde(skip_serializing_if = "Option::is_none")]
    lookup_mops_batched_hashes: Option<f64>,
    update_kops: Option<f64>,
    /// SetSep only: the same updates, one `Updatable::insert` call each (`update_kops` is
    /// `insert_batch` in batches of `--batch`).
    #[serde(skip_serializing_if = "Option::is_none")]
    update_kops_single: Option<f64>,
    fallback_ratio: Option<f64>,
    /// Measured from `/proc/self/smaps` over the structure's mappings: `2M`, `4K`, `mixed (..)`.
    page_size: String,
    /// How: bytes measured and their shares on hugetlbfs, THP and 4 KB pages.
    page_detail: String,
    correct: bool,
    wrong: u64,
    note: String,
}

/// The shared workload.
struct Work {
    value_bits: u32,
    batch: usize,
    /// Keys in insertion order.
    keys: Vec<&'static [u8]>,
    values: Vec<u16>,
    /// Keys in the lookup order (copies, contiguous in that order) and their true values.
    perm_keys: Vec<&'static [u8]>,
    perm_values: Vec<u16>,
    /// Update sequence: (key index, the key's bytes, new value), each a change. The keys are
    /// copies stored contiguously in update order (like the lookup keys), so the timed loops
    /// measure the structures, not cache misses on the benchmark's own key array.
    updates: Vec<(u32, &'static [u8], u16)>,
}

/// An invertible 64-bit mixer (xor-shifts and odd multiplications are bijections).
fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// An invertible 32-bit mixer.
fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

impl Work {
    fn generate(a: &Args, n: usize) -> anyhow::Result<Work> {
        let kb = a.key_bytes;
        if !(4..=64).contains(&kb) {
            bail!("--key-bytes must be 4 to 64");
        }
        if kb < 8 && n as u64 > u32::MAX as u64 {
            bail!("at most 2^32 distinct keys of fewer than 8 bytes");
        }
        if n > u32::MAX as usize {
            bail!("at most 2^32 keys");
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed);
        let salt: u64 = rng.gen();
        let mut arena = vec![0u8; n * kb];
        rng.fill(&mut arena[..]);
        for (i, k) in arena.chunks_exact_mut(kb).enumerate() {
            if kb >= 8 {
                k[..8].copy_from_slice(&mix64((i as u64).wrapping_add(salt)).to_le_bytes());
            } else {
                k[..4].copy_from_slice(&mix32((i as u32).wrapping_add(salt as u32)).to_le_bytes());
            }
        }
        // The keys live for the whole process (one benchmark per process).
        let arena: &'static [u8] = Vec::leak(arena);
        let keys: Vec<&'static [u8]> = arena.chunks_exact(kb).collect();
        let mask = ((1u32 << a.value_bits) - 1) as u16;
        let values: Vec<u16> = (0..n).map(|_| rng.gen::<u16>() & mask).collect();
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.shuffle(&mut rng);
        // The lookup-order keys are copied into their own arena, in that order: a network
        // function reads its keys from packet headers that are already in cache, so the
        // lookups should not pay a cache miss for fetching each key's bytes (the same for every
        // structure).
        let mut perm_arena = Vec::with_capacity(n * kb);
        for &i in &order {
            perm_arena.extend_from_slice(keys[i as usize]);
        }
        let perm_arena: &'static [u8] = Vec::leak(perm_arena);
        let perm_keys = perm_arena.chunks_exact(kb).collect();
        let perm_values = order.iter().map(|&i| values[i as usize]).collect();
        drop(order);
        let nu = a.updates.min(n);
        let changes: Vec<(u32, u16)> = (0..nu)
            .map(|_| {
                let i = rng.gen_range(0..n as u32);
                // A value different from the current one (for 1-bit values: the other one).
                let delta = rng.gen_range(1..=mask.max(1));
                (i, (values[i as usize] ^ delta) & mask)
            })
            .collect();
        let mut upd_arena = Vec::with_capacity(nu * kb);
        for &(i, _) in &changes {
            upd_arena.extend_from_slice(keys[i as usize]);
        }
        let upd_arena: &'static [u8] = Vec::leak(upd_arena);
        let updates = changes
            .iter()
            .zip(upd_arena.chunks_exact(kb))
            .map(|(&(i, v), k)| (i, k, v))
            .collect();
        Ok(Work {
            value_bits: a.value_bits,
            batch: a.batch.max(1),
            keys,
            values,
            perm_keys,
            perm_values,
            updates,
        })
    }

    fn n(&self) -> usize {
        self.keys.len()
    }
}

/// The lookup part of a row: wrong answers, and the rates when there are none.
struct LookupResult {
    wrong: u64,
    single: Option<f64>,
    batched: Option<f64>,
}

/// Checks every key singly and batched against the truth, then (if all are right) times both.
fn measure(s: &impl Lookup, w: &Work, name: &str) -> LookupResult {
    let n = w.n();
    let b = w.batch;
    let mut out = vec![0u16; b];
    let mut wrong = 0u64;
    for (ks, vs) in w.perm_keys.chunks(b).zip(w.perm_values.chunks(b)) {
        let o = &mut out[..ks.len()];
        s.get_batch(ks, o);
        for ((k, v), got) in ks.iter().zip(vs).zip(o.iter()) {
            if got != v || s.get(k) != *v {
                wrong += 1;
            }
        }
    }
    if wrong > 0 {
        eprintln!("  {name}: {wrong} of {n} keys answered wrong; not timed");
        return LookupResult {
            wrong,
            single: None,
            batched: None,
        };
    }
    if n == 0 {
        return LookupResult {
            wrong,
            single: None,
            batched: None,
        };
    }
    let timed = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        let mut passes = 0u64;
        loop {
            f();
            passes += 1;
            let el = t.elapsed().as_secs_f64();
            if el >= MIN_TIMED_S {
                return (passes * n as u64) as f64 / el / 1e6;
            }
        }
    };
    let single = timed(&mut || {
        let mut acc = 0u16;
        for k in &w.perm_keys {
            acc ^= s.get(k);
        }
        black_box(acc);
    });
    let batched = timed(&mut || {
        for ks in w.perm_keys.chunks(b) {
            let o = &mut out[..ks.len()];
            s.get_batch(ks, o);
            black_box(o);
        }
    });
    eprintln!(
        "  {name}: all {n} keys right; lookups {single:.2} Mops single, {batched:.2} Mops batched"
    );
    LookupResult {
        wrong,
        single: Some(single),
        batched: Some(batched),
    }
}

/// `(page_size, page_detail)` of the mappings that appeared since `snap` (a structure whose
/// crate keeps its arrays private, measured right after it was built).
fn new_mappings(snap: &MapSnapshot) -> (String, String) {
    let (l, d) = crate::pages::label(crate::pages::measured(snap.measure_new()));
    (l, format!("{d} (mappings new since the build started)"))
}

fn rate_m(n: usize, secs: f64) -> f64 {
    n as f64 / secs.max(1e-9) / 1e6
}

/// Fills the lookup columns of `row` (and clears its rates if anything answered wrong).
fn finish(row: &mut Row, l: LookupResult, n: usize) {
    row.wrong += l.wrong;
    row.correct = row.wrong == 0;
    row.lookup_mops_single = l.single;
    row.lookup_mops_batched = l.batched;
    if !row.correct {
        row.build_mkeys_per_s = None;
        row.update_kops = None;
        row.lookup_mops_single = None;
        row.lookup_mops_batched = None;
        let msg = format!("WRONG: {} of {n} keys answered wrong; not timed", row.wrong);
        row.note = if row.note.is_empty() {
            msg
        } else {
            format!("{msg}; {}", row.note)
        };
    }
}

impl Lookup for SetSep {
    #[inline]
    fn get(&self, key: &[u8]) -> u16 {
        self.lookup(key)
    }

    fn get_batch(&self, keys: &[&[u8]], out: &mut [u16]) {
        self.lookup_batch(keys, out)
    }
}

impl Lookup for LiveSetSep {
    #[inline]
    fn get(&self, key: &[u8]) -> u16 {
        self.lookup(key)
    }

    fn get_batch(&self, keys: &[&[u8]], out: &mut [u16]) {
        self.lookup_batch(keys, out)
    }
}

/// The same table as a [`LiveSetSep`]: its row (checked and timed like the others), and
/// `lookup_batch_hashes` of both tables over the keys' hashes, timed alternately (3 times
/// each, medians) into both rows.
fn run_live(w: &Work, s: &SetSep, row: &mut Row) -> Row {
    let n = w.n();
    let mut live_row = Row {
        name: format!("{}-live", row.name),
        build_threads: row.build_threads,
        bits_per_key: row.bits_per_key,
        fallback_ratio: row.fallback_ratio,
        note: "LiveSetSep::new of the row above (no build): lookups through per-block versions"
            .into(),
        ..Row::default()
    };
    eprintln!("{}: copying the table", live_row.name);
    let live = LiveSetSep::new(s.clone());
    (live_row.page_size, live_row.page_detail) = crate::pages::label(Some(live.stats().page_info));
    let l = measure(&live, w, &live_row.name);
    let hs: Vec<_> = w.perm_keys.iter().map(|k| s.hash_key(k)).collect();
    let mut out = vec![0u16; n];
    live.lookup_batch_hashes(&hs, &mut out);
    let wrong = out
        .iter()
        .zip(&w.perm_values)
        .filter(|(a, b)| a != b)
        .count() as u64;
    finish(&mut live_row, l, n);
    if wrong > 0 || !row.correct || !live_row.correct || n == 0 {
        live_row.wrong += wrong;
        return live_row;
    }
    let b = w.batch;
    let mut o = vec![0u16; b];
    let mut timed = |f: &dyn Fn(&[sb_common::KeyHash], &mut [u16])| {
        let t = Instant::now();
        let mut passes = 0u64;
        loop {
            for hc in hs.chunks(b) {
                let o = &mut o[..hc.len()];
                f(hc, o);
                black_box(o);
            }
            passes += 1;
            let el = t.elapsed().as_secs_f64();
            if el >= MIN_TIMED_S {
                return (passes * n as u64) as f64 / el / 1e6;
            }
        }
    };
    let (mut a, mut c) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        a.push(timed(&|h, o| s.lookup_batch_hashes(h, o)));
        c.push(timed(&|h, o| live.lookup_batch_hashes(h, o)));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[1]
    };
    let (a, c) = (median(&mut a), median(&mut c));
    row.lookup_mops_batched_hashes = Some(a);
    live_row.lookup_mops_batched_hashes = Some(c);
    eprintln!(
        "  batched hash lookups: SetSep {a:.2} Mops, LiveSetSep {c:.2} Mops ({:.3}x)",
        c / a
    );
    live_row
}

fn run_setsep(w: &Work, config: Config, threads: usize, seed: u64) -> anyhow::Result<Vec<Row>> {
    let n = w.n();
    let mut row = Row {
        name: format!("setsep-{config}"),
        build_threads: threads,
        ..Row::default()
    };
    let opts = BuildOptions {
        config,
        value_bits: w.value_bits as u8,
        threads,
        seed,
        ..BuildOptions::default()
    };
    eprintln!("{}: building ({threads} thread(s))", row.name);
    let t = Instant::now();
    let s = SetSep::build(&w.keys, &w.values, &opts).context("SetSep build")?;
    let el = t.elapsed().as_secs_f64();
    row.build_mkeys_per_s = Some(rate_m(n, el));
    let st = s.stats();
    row.bits_per_key = Some(st.bits_per_key);
    row.fallback_ratio = Some(if n == 0 {
        0.0
    } else {
        st.fallback_keys as f64 / n as f64
    });
    (row.page_size, row.page_detail) = crate::pages::label(Some(st.page_info));
    eprintln!(
        "  built in {el:.2}s: {:.3} bits/key, {} fallback keys, pages {}",
        st.bits_per_key, st.fallback_keys, row.page_size
    );
    let l = measure(&s, w, &row.name);
    row.correct = l.wrong == 0;
    let live_row = run_live(w, &s, &mut row);
    drop(s);
    row.note = format!(
        "batched = lookup_batch (3-stage prefetch pipeline) in batches of {}; updates: Updatable::insert_batch in batches of {} on a table built separately (keeps the keys), each update yields a delta; update_kops_single: one Updatable::insert call per update",
        w.batch, w.batch
    );

    if l.wrong == 0 && !w.updates.is_empty() {
        eprintln!("  updates: building the updatable tables");
        // The same updates on two equal tables: one `insert` call per update on the first, then
        // `insert_batch` in batches of `--batch` (a stream of RIB changes, e.g.) on the second,
        // whose table is the one checked.
        let mut single = Updatable::build(&w.keys, &w.values, &opts).context("Updatable build")?;
        let mut u = Updatable::build(&w.keys, &w.values, &opts).context("Updatable build")?;
        let mut delta_count = 0u64;
        let t = Instant::now();
        for &(i, k, v) in &w.updates {
            let d = single
                .insert(k, v)
                .with_context(|| format!("Updatable::insert of key {i}"))?;
            black_box(&d);
            delta_count += 1;
        }
        row.update_kops_single =
            Some(delta_count as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e3);
        drop(single);
        let ups: Vec<(&[u8], u16)> = w.updates.iter().map(|&(_, k, v)| (k, v)).collect();
        let mut delta_count = 0u64;
        let t = Instant::now();
        for c in ups.chunks(w.batch) {
            u.insert_batch(c, |d| {
                black_box(&d);
                delta_count += 1;
            })
            .context("Updatable::insert_batch")?;
        }
        let el = t.elapsed().as_secs_f64();
        row.update_kops = Some(delta_count as f64 / el.max(1e-9) / 1e3);
        // The updated table must answer the new values.
        let mut truth = w.values.clone();
        for &(i, _, v) in &w.updates {
            truth[i as usize] = v;
        }
        let tab = u.table();
        let wrong = w
            .keys
            .iter()
            .zip(&truth)
            .filter(|(k, v)| tab.lookup(k) != **v)
            .count() as u64;
        if wrong > 0 {
            eprintln!("  updates: {wrong} keys wrong after the updates");
            row.wrong += wrong;
        }
        eprintln!(
            "  updates: {:.1} K/s ({} deltas)",
            row.update_kops.unwrap_or(0.0),
            delta_count
        );
    }
    finish(&mut row, l, n);
    Ok(vec![row, live_row])
}

fn run_sux(w: &Work, threads: usize, seed: u64) -> anyhow::Result<Row> {
    let n = w.n();
    let mut row = Row {
        name: "sux-vfunc".into(),
        build_threads: threads,
        note: "no batch API: batched = single lookups in batches".into(),
        ..Row::default()
    };
    eprintln!("sux-vfunc: building ({threads} thread(s))");
    let snap = MapSnapshot::take()?;
    let t = Instant::now();
    let s = peers::SuxVFunc::build(&w.keys, &w.values, threads, seed).context("sux VFunc build")?;
    row.build_mkeys_per_s = Some(rate_m(n, t.elapsed().as_secs_f64()));
    (row.page_size, row.page_detail) = new_mappings(&snap);
    row.bits_per_key = Some(s.bytes() as f64 * 8.0 / n.max(1) as f64);
    let l = measure(&s, w, &row.name);
    finish(&mut row, l, n);
    Ok(row)
}

fn run_ptr_hash(w: &Work, threads: usize) -> anyhow::Result<Row> {
    let n = w.n();
    let mut row = Row {
        name: "ptr_hash".into(),
        build_threads: threads,
        note: peers::PTR_HASH_NOTE.into(),
        ..Row::default()
    };
    eprintln!("ptr_hash: building ({threads} thread(s))");
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("rayon pool")?;
    let t = Instant::now();
    let s = pool.install(|| peers::PtrHashValues::build(&w.keys, &w.values, w.value_bits));
    row.build_mkeys_per_s = Some(rate_m(n, t.elapsed().as_secs_f64()));
    // PtrHash keeps its pilot and remap arrays private: the mapping of our value array.
    let (l, d) = crate::pages::label(crate::pages::measured(
        sb_common::pages::measure_mappings_holding(&[s.values_addr()]),
    ));
    (row.page_size, row.page_detail) = (l, format!("{d} (the mapping holding its value array)"));
    row.bits_per_key = Some(s.bytes() as f64 * 8.0 / n.max(1) as f64);
    let l = measure(&s, w, &row.name);
    finish(&mut row, l, n);
    Ok(row)
}

fn run_hashbrown(w: &Work) -> anyhow::Result<Row> {
    let n = w.n();
    let mut row = Row {
        name: "hashbrown".into(),
        build_threads: 1,
        note: "HashMap<Box<[u8]>, u16> storing the keys; no batch API: batched = single lookups in batches; updates = insert".into(),
        ..Row::default()
    };
    eprintln!("hashbrown: building");
    let snap = MapSnapshot::take()?;
    let t = Instant::now();
    let mut s = peers::HashbrownMap::build(&w.keys, &w.values);
    row.build_mkeys_per_s = Some(rate_m(n, t.elapsed().as_secs_f64()));
    (row.page_size, row.page_detail) = new_mappings(&snap);
    row.bits_per_key = Some(s.bytes() as f64 * 8.0 / n.max(1) as f64);
    let l = measure(&s, w, &row.name);
    if l.wrong == 0 && !w.updates.is_empty() {
        let t = Instant::now();
        for &(_, k, v) in &w.updates {
            s.insert(k, v);
        }
        row.update_kops = Some(w.updates.len() as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e3);
    }
    finish(&mut row, l, n);
    Ok(row)
}

#[cfg(feature = "dpdk")]
fn run_efd(w: &Work, pages: crate::pages::Pages) -> anyhow::Result<Option<Row>> {
    run_efd_row(w, pages).map(Some)
}

#[cfg(feature = "dpdk")]
fn run_efd_row(w: &Work, pages: crate::pages::Pages) -> anyhow::Result<Row> {
    use sb_peers::dpdk::efd::{Efd, EfdError};
    let n = w.n();
    let kb = w.keys.first().map_or(13, |k| k.len());
    let mut row = Row {
        name: "dpdk-efd".into(),
        build_threads: 1,
        ..Row::default()
    };
    let vbits = Efd::value_bits();
    let eal = pages.start_eal(sb_peers::dpdk::efd::mem_mb_for(n, kb))?;
    let eal_pages = if eal["hugepages"].as_bool() == Some(true) {
        format!(
            "EAL on 2 MB hugepages ({})",
            eal["why"].as_str().unwrap_or("")
        )
    } else {
        format!(
            "EAL without hugepages ({})",
            eal["why"].as_str().unwrap_or("")
        )
    };
    row.note = format!(
        "Debian DPDK EFD, RTE_EFD_VALUE_NUM_BITS={vbits} (values masked to {} bits); EAL started with --force-max-simd-bitwidth=128 because its AVX2 lookup path answers ~75% wrong on this machine; {eal_pages}; bits/key = online table only (rte_efd.h formula; the offline key store is extra); build = one rte_efd_update per key; batched = rte_efd_lookup_bulk in bursts of {}; updates = rte_efd_update with a new value",
        w.value_bits,
        Efd::burst_max().min(w.batch)
    );
    if w.value_bits > vbits {
        row.note = format!(
            "skipped: {} value bits > RTE_EFD_VALUE_NUM_BITS={vbits}",
            w.value_bits
        );
        row.correct = false;
        return Ok(row);
    }
    eprintln!("dpdk-efd: inserting {n} keys");
    let efd = Efd::new(n, kb).context("creating the EFD table")?;
    let mut peer = peers::EfdPeer {
        efd,
        mask: ((1u32 << w.value_bits) - 1) as u16,
    };
    let t = Instant::now();
    for (i, (k, v)) in w.keys.iter().zip(&w.values).enumerate() {
        match peer.efd.update(k, *v as u32) {
            Ok(_) => {}
            Err(EfdError::UpdateFailed) => {
                row.correct = false;
                row.note = format!("rte_efd_update failed at key {i} of {n}; {}", row.note);
                return Ok(row);
            }
            Err(e) => return Err(e).context("rte_efd_update"),
        }
    }
    row.build_mkeys_per_s = Some(rate_m(n, t.elapsed().as_secs_f64()));
    row.bits_per_key = Some(peers::efd_online_bytes(n) as f64 * 8.0 / n.max(1) as f64);
    (row.page_size, row.page_detail) = crate::pages::dpdk(&eal);
    // Bursts of at most RTE_EFD_BURST_MAX: batches larger than that are split by the wrapper.
    let l = measure(&peer, w, &row.name);
    if l.wrong == 0 && !w.updates.is_empty() {
        let t = Instant::now();
        let mut failed = 0u64;
        for &(_, k, v) in &w.updates {
            if peer.efd.update(k, v as u32).is_err() {
                failed += 1;
            }
        }
        row.update_kops = Some(w.updates.len() as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e3);
        if failed > 0 {
            row.wrong += failed;
            row.note = format!("{failed} updates failed; {}", row.note);
        }
    }
    finish(&mut row, l, n);
    Ok(row)
}

#[cfg(not(feature = "dpdk"))]
fn run_efd(_w: &Work, _pages: crate::pages::Pages) -> anyhow::Result<Option<Row>> {
    eprintln!("dpdk-efd: skipped (scalebricks-bench was built without the `dpdk` feature)");
    Ok(None)
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if a.threads == 0 {
        bail!("--threads must be at least 1");
    }
    let configs: Vec<Config> = a
        .configs
        .split(',')
        .map(|c| {
            c.trim()
                .parse::<Config>()
                .map_err(|e| anyhow::anyhow!("--configs: `{c}`: {e}"))
        })
        .collect::<anyhow::Result<_>>()?;
    if let Some(range) = &a.grow {
        return run_grow(&a, range, configs[0]);
    }
    a.pages.apply();
    let n_keys = a.keys.context("--keys is required")?;
    let known = ["setsep", "dpdk-efd", "sux-vfunc", "ptr_hash", "hashbrown"];
    let peers: Vec<&str> = a
        .peers
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    for p in &peers {
        if !known.contains(p) {
            bail!("--peers: unknown `{p}` (known: {})", known.join(", "));
        }
    }
    eprintln!(
        "generating {n_keys} keys of {} bytes, {}-bit values",
        a.key_bytes, a.value_bits
    );
    let w = Work::generate(&a, n_keys)?;
    let mut rows = Vec::new();
    for p in &peers {
        match *p {
            "setsep" => {
                for &c in &configs {
                    rows.extend(run_setsep(&w, c, a.threads, a.seed)?);
                }
            }
            "dpdk-efd" => rows.extend(run_efd(&w, a.pages)?),
            "sux-vfunc" => rows.push(run_sux(&w, a.threads, a.seed)?),
            "ptr_hash" => rows.push(run_ptr_hash(&w, a.threads)?),
            "hashbrown" => rows.push(run_hashbrown(&w)?),
            _ => unreachable!("checked above"),
        }
    }
    let params = serde_json::json!({
        "keys": n_keys,
        "value_bits": a.value_bits,
        "threads": a.threads,
        "batch": w.batch,
        "key_bytes": a.key_bytes,
        "seed": a.seed,
        "configs": configs.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
        "peers": peers,
        "updates": w.updates.len(),
        "dpdk_feature": cfg!(feature = "dpdk"),
        "pages": a.pages.name(),
        "dpdk_eal": crate::pages::eal_started_json(),
        "cpu": cpu_model(),
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "peak_rss_mib": peak_rss_mib(),
    });
    let out = serde_json::json!({ "params": params, "results": rows });
    if a.json {
        println!("{out}");
    } else {
        print_table(&rows);
    }
    Ok(())
}

/// `--grow FROM:TO`: the growth run of [`grow`], one JSON object (or a table) out.
fn run_grow(a: &Args, range: &str, config: Config) -> anyhow::Result<()> {
    let (from, to) = grow::parse_range(range)?;
    let (rows, wrong) = grow::run(a, from, to, config)?;
    let params = serde_json::json!({
        "grow_from": from,
        "grow_to": to,
        "value_bits": a.value_bits,
        "threads": a.threads,
        "batch": a.batch.max(1),
        "key_bytes": a.key_bytes,
        "seed": a.seed,
        "config": config.to_string(),
        "growth": "default (grow past 100% of 1024 keys per block to 89%)",
        "cpu": cpu_model(),
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "peak_rss_mib": peak_rss_mib(),
    });
    let out = serde_json::json!({
        "params": params,
        "results": rows,
        "correct": wrong == 0,
        "wrong": wrong,
    });
    if a.json {
        println!("{out}");
    } else {
        println!(
            "{:>10} {:>7} {:>9} {:>10} {:>11} {:>13} {:>7}",
            "keys", "blocks", "bits/key", "fallback", "insert K/s", "bytes/insert", "growths"
        );
        for r in &out["results"].as_array().cloned().unwrap_or_default() {
            let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
            let u = |k: &str| r[k].as_u64().unwrap_or(0);
            println!(
                "{:>10} {:>7} {:>9.3} {:>9.5}% {:>11.1} {:>13.2} {:>7}",
                u("keys"),
                u("blocks"),
                f("bits_per_key"),
                f("fallback_ratio") * 100.0,
                f("insert_kops"),
                f("delta_bytes_per_key"),
                u("growths")
            );
        }
        println!("replica and owner correct: {}", wrong == 0);
    }
    if wrong > 0 {
        bail!("{wrong} wrong answers after the growth run");
    }
    Ok(())
}

/// The process's peak resident memory so far (VmHWM), in MiB.
fn peak_rss_mib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default()
}

fn print_table(rows: &[Row]) {
    let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.3}"));
    println!(
        "{:<14} {:>10} {:>9} {:>10} {:>10} {:>10} {:>10} {:>6} {:>7}",
        "name",
        "build M/s",
        "bits/key",
        "single M",
        "batch M",
        "upd K/s",
        "fallback",
        "pages",
        "correct"
    );
    for r in rows {
        println!(
            "{:<14} {:>10} {:>9} {:>10} {:>10} {:>10} {:>10} {:>6} {:>7}",
            r.name,
            f(r.build_mkeys_per_s),
            f(r.bits_per_key),
            f(r.lookup_mops_single),
            f(r.lookup_mops_batched),
            f(r.update_kops),
            r.fallback_ratio
                .map_or("-".into(), |v| format!("{:.5}%", v * 100.0)),
            r.page_size,
            r.correct
        );
    }
}
