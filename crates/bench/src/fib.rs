//! `scalebricks-bench fib`: the partial FIB (our cuckoo table) against DPDK rte_hash, libcuckoo,
//! hashbrown and dashmap, on the same keys and the same access sequence, in one process; JSON out.
//!
//! Each structure is built for `entries` keys at load factor `load` (capacity `entries / load`
//! where the structure takes a capacity), filled (timed: `insert_mops`), checked on up to 1M
//! lookups of the access sequence answer by answer, then timed on the whole sequence in batches of
//! `batch` (`lookup_mops`; a pass's hit count is checked too). With `--mixed`, one writer thread
//! inserts and deletes churn keys continuously (displacing keys in cuckoo tables) while the reader
//! runs the batched lookups, checking every answer: table keys are never deleted and their values
//! name their key, so a reader must find each with its value, and never find a miss key.
//! With `--max-load`, each fixed-size structure is also filled to its first failed insert at
//! capacity `entries` (`max_load_factor`).

mod structs;
mod workload;

use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use structs::{Fib, FibReader, FibWriter};
use workload::Workload;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Keys in the table.
    #[arg(long, default_value_t = 1 << 20)]
    entries: usize,
    /// Key size in bytes (4..=64; hashbrown/dashmap/libcuckoo rows need 4, 13, 16 or 40).
    #[arg(long, default_value_t = 13)]
    key_bytes: usize,
    /// Value size in bytes (1..=256; hashbrown/dashmap/libcuckoo rows need 8, 16 or 64).
    #[arg(long, default_value_t = 16)]
    value_bytes: usize,
    /// Load factor: structures get a capacity of entries / load.
    #[arg(long, default_value_t = 0.9)]
    load: f64,
    /// Lookups per batch (1 = single lookups).
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Share of lookups that hit, as a fraction (0.5) or a percentage (50).
    #[arg(long, default_value_t = 1.0)]
    hit_ratio: f64,
    /// Zipf exponent of the hit keys' popularity (uniform when absent).
    #[arg(long)]
    zipf: Option<f64>,
    /// Also run one writer (inserts/deletes) against one reader.
    #[arg(long)]
    mixed: bool,
    /// Print JSON (otherwise a table).
    #[arg(long)]
    json: bool,
    /// Also measure the load factor at the first failed insert (capacity = entries).
    #[arg(long)]
    max_load: bool,
    /// Length of the access sequence.
    #[arg(long, default_value_t = 4_000_000)]
    lookups: usize,
    /// Minimum seconds of timed lookups per structure.
    #[arg(long, default_value_t = 1.0)]
    secs: f64,
    /// Seconds of each phase of the mixed run (reader alone, reader with writer).
    #[arg(long, default_value_t = 2.0)]
    mixed_secs: f64,
    /// Slots per bucket of our table (4: `Params::fast`, 8: `Params::compact`).
    #[arg(long, default_value_t = 4)]
    slots: usize,
    /// Seed of keys and access sequence.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Only these structures (comma separated row names).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Pages: `2m` (our arrays and libcuckoo's advised for 2 MB pages; DPDK on 2 MB hugepages
    /// when reserved and mounted, see scripts/hugepages.sh) or `4k` (the control: no huge pages
    /// for anyone). Every row's `page_size` is measured either way.
    #[arg(long, value_enum, default_value_t = crate::pages::Pages::TwoM)]
    pages: crate::pages::Pages,
}

pub fn run(mut a: Args) -> anyhow::Result<()> {
    if a.hit_ratio > 1.0 {
        a.hit_ratio /= 100.0;
    }
    anyhow::ensure!(
        (0.0..=1.0).contains(&a.hit_ratio),
        "hit ratio must be 0..=1 or 0..=100%"
    );
    anyhow::ensure!(a.load > 0.0 && a.load <= 1.0, "load must be in (0, 1]");
    anyhow::ensure!(a.batch >= 1, "batch must be at least 1");
    anyhow::ensure!(a.lookups >= a.batch, "need at least one batch of lookups");
    a.pages.apply();
    let w = Workload::new(
        a.entries,
        a.key_bytes,
        a.value_bytes,
        a.lookups,
        a.hit_ratio,
        a.zipf,
        a.seed,
    )?;
    let cap = (a.entries as f64 / a.load).ceil() as usize;
    let want = |name: &str| a.only.is_empty() || a.only.iter().any(|o| o == name);
    let mut rows = Vec::new();
    let mut notes: Vec<String> = Vec::new();

    if want("scalebricks-cuckoo") {
        let mut t = structs::Ours::new(a.key_bytes, a.value_bytes, cap, a.slots, a.batch)?;
        let mut row = measure(&mut t, &w, &a);
        if a.max_load {
            let m = structs::Ours::new(a.key_bytes, a.value_bytes, a.entries, a.slots, a.batch)?;
            row["max_load_factor"] = json!(max_load(m, &w));
        }
        if a.mixed {
            let single = a.batch == 1;
            let (wr, rd) = t.t.into_concurrent();
            mixed(
                structs::OursWriter(wr),
                structs::OursReader(rd, single),
                &w,
                &a,
                &mut row,
            );
        }
        rows.push(row);
    }

    #[cfg(feature = "dpdk")]
    if want("dpdk-rte_hash") {
        // About 112 bytes of EAL memory per entry (buckets, key store, RCU defer queue) plus
        // the value slot and its free-list entry; the max-load table lives next to the main one.
        let tables = if a.max_load { 2 } else { 1 };
        let per = 112 + a.value_bytes as u64 + 4;
        let mem_mb = ((cap.max(a.entries) as u64 * per * tables) >> 20) as u32 + 256;
        let eal = a.pages.start_eal(mem_mb)?;
        let mut t = structs::rte::Rte::new(a.key_bytes, a.value_bytes, cap, a.batch)?;
        let mut row = measure(&mut t, &w, &a);
        let (_, detail) = crate::pages::dpdk(&eal);
        row["page_detail"] = json!(detail);
        if a.max_load {
            let m = structs::rte::Rte::new(a.key_bytes, a.value_bytes, a.entries, a.batch)?;
            row["max_load_factor"] = json!(max_load(m, &w));
        }
        if a.mixed {
            let rd = t.h.reader()?;
            mixed(
                structs::rte::RteWriter(t.h),
                structs::rte::RteReader(rd, a.batch == 1),
                &w,
                &a,
                &mut row,
            );
        }
        rows.push(row);
    }
    #[cfg(not(feature = "dpdk"))]
    if want("dpdk-rte_hash") {
        notes.push("dpdk-rte_hash: built without the `dpdk` feature".into());
    }

    #[cfg(feature = "libcuckoo")]
    if want("libcuckoo") {
        use sb_peers::libcuckoo::LibCuckoo;
        match LibCuckoo::new(a.key_bytes, a.value_bytes, cap, false) {
            Ok(lc) => {
                let mut t = structs::lc::Lc(std::sync::Arc::new(lc));
                let mut row = measure(&mut t, &w, &a);
                if a.max_load {
                    let m = LibCuckoo::new(a.key_bytes, a.value_bytes, a.entries, true)?;
                    row["max_load_factor"] =
                        json!(max_load(structs::lc::Lc(std::sync::Arc::new(m)), &w));
                }
                if a.mixed {
                    let r = structs::lc::Lc(t.0.clone());
                    mixed(t, r, &w, &a, &mut row);
                }
                rows.push(row);
            }
            Err(e) => notes.push(format!("libcuckoo: {e}")),
        }
    }
    #[cfg(not(feature = "libcuckoo"))]
    if want("libcuckoo") {
        notes.push("libcuckoo: built without the `libcuckoo` feature".into());
    }

    if want("hashbrown") {
        match with_kv(a.key_bytes, a.value_bytes, &w, &a, Kind::Hashbrown) {
            Some(row) => rows.push(row),
            None => notes.push("hashbrown: key/value size not instantiated".into()),
        }
    }
    if want("dashmap") {
        match with_kv(a.key_bytes, a.value_bytes, &w, &a, Kind::Dashmap) {
            Some(row) => rows.push(row),
            None => notes.push("dashmap: key/value size not instantiated".into()),
        }
    }

    let wrong: u64 = rows
        .iter()
        .map(|r| r["verify_wrong"].as_u64().unwrap_or(0) + r["wrong_answers"].as_u64().unwrap_or(0))
        .sum();
    let out = json!({
        "params": {
            "entries": a.entries, "key_bytes": a.key_bytes, "value_bytes": a.value_bytes,
            "load": a.load, "batch": a.batch, "hit_ratio": a.hit_ratio, "zipf": a.zipf,
            "mixed": a.mixed, "max_load": a.max_load, "lookups": a.lookups, "slots_per_bucket": a.slots,
            "seed": a.seed, "capacity": cap, "machine": machine(),
            "pages": a.pages.name(), "dpdk_eal": crate::pages::eal_started_json(),
        },
        "results": rows,
        "notes": notes,
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_table(&out);
    }
    anyhow::ensure!(
        wrong == 0,
        "{wrong} wrong answers (see verify_wrong / wrong_answers)"
    );
    Ok(())
}

enum Kind {
    Hashbrown,
    Dashmap,
}

fn with_kv(kb: usize, vb: usize, w: &Workload, a: &Args, kind: Kind) -> Option<Value> {
    macro_rules! go {
        ($($k:literal, $v:literal);*) => {
            match (kb, vb) {
                $( ($k, $v) => Some(run_kv::<$k, $v>(w, a, kind)), )*
                _ => None,
            }
        };
    }
    go!(4, 8; 4, 16; 4, 64; 13, 8; 13, 16; 13, 64; 16, 8; 16, 16; 16, 64; 40, 8; 40, 16; 40, 64)
}

fn run_kv<const K: usize, const V: usize>(w: &Workload, a: &Args, kind: Kind) -> Value {
    match kind {
        Kind::Hashbrown => {
            let mut t = structs::Hb::<K, V>(hashbrown::HashMap::with_capacity(a.entries));
            measure(&mut t, w, a)
        }
        Kind::Dashmap => {
            let map = std::sync::Arc::new(dashmap::DashMap::with_capacity(a.entries));
            let mut t = structs::Dm::<K, V>(map);
            let mut row = measure(&mut t, w, a);
            if a.mixed {
                let r = structs::Dm::<K, V>(t.0.clone());
                mixed(t, r, w, a, &mut row);
            }
            row
        }
    }
}

/// Fill, check, time lookups.
fn measure<T: Fib>(t: &mut T, w: &Workload, a: &Args) -> Value {
    let (kb, vb) = (w.kb, w.vb);
    let mut v = vec![0u8; vb];
    let mut failed = 0u64;
    let start = Instant::now();
    for i in 0..w.n {
        workload::value(i as u64, &mut v);
        if !t.insert(w.key_of(i), &v) {
            failed += 1;
        }
    }
    let insert_s = start.elapsed().as_secs_f64();
    let b = a.batch;
    let mut vals = vec![0u8; b * vb];
    let mut found = vec![false; b];
    // Answer-by-answer check on (up to) the first 1M lookups.
    let mut wrong = 0u64;
    let check_n = w.lookups().min(1 << 20);
    let mut s = 0;
    while s < check_n {
        let m = b.min(check_n - s);
        t.lookup_batch(
            &w.access[s * kb..(s + m) * kb],
            &mut vals[..m * vb],
            &mut found[..m],
        );
        wrong += w.check(s, &found[..m], &vals[..m * vb]);
        s += m;
    }
    // Timed passes over the whole sequence; each pass's hit count is checked.
    let expected_hits = w
        .access_idx
        .iter()
        .filter(|&&i| i != workload::MISS)
        .count();
    let l = w.lookups();
    let mut done = 0usize;
    let cpu0 = thread_cpu_ns();
    let start = Instant::now();
    loop {
        let mut hits = 0;
        let mut s = 0;
        while s < l {
            let m = b.min(l - s);
            hits += t.lookup_batch(
                &w.access[s * kb..(s + m) * kb],
                &mut vals[..m * vb],
                &mut found[..m],
            );
            s += m;
        }
        wrong += hits.abs_diff(expected_hits) as u64;
        done += l;
        if start.elapsed().as_secs_f64() >= a.secs {
            break;
        }
    }
    let lookup_s = start.elapsed().as_secs_f64();
    let lookup_cpu_s = (thread_cpu_ns() - cpu0) as f64 / 1e9;
    let cap = t.capacity();
    let (page_size, page_detail) = crate::pages::label(t.pages());
    json!({
        "name": t.name(),
        "lookup_mops": done as f64 / lookup_s / 1e6,
        "lookup_mops_cpu": done as f64 / lookup_cpu_s / 1e6,
        "insert_mops": w.n as f64 / insert_s / 1e6,
        "bytes_per_entry": t.memory_bytes() as f64 / w.n as f64,
        "max_load_factor": Value::Null,
        "page_size": page_size,
        "page_detail": page_detail,
        "batched": t.batched() && b > 1,
        "capacity": cap,
        "load": cap.map(|c| w.n as f64 / c as f64),
        "failed_inserts": failed,
        "verify_wrong": wrong,
    })
}

/// Inserts table keys until the first failure; the load factor reached.
fn max_load<T: Fib>(mut t: T, w: &Workload) -> f64 {
    let cap = t.capacity().expect("fixed-size structure");
    let mut v = vec![0u8; w.vb];
    let mut n = 0;
    while n < w.n {
        workload::value(n as u64, &mut v);
        if !t.insert(w.key_of(n), &v) {
            break;
        }
        n += 1;
    }
    n as f64 / cap as f64
}

/// One reader alone, then the same reader with one writer churning keys.
fn mixed<W: FibWriter, R: FibReader>(
    mut wr: W,
    mut rd: R,
    w: &Workload,
    a: &Args,
    row: &mut Value,
) {
    let churn = (w.n / 32).max(64);
    let (alone, alone_cpu, wrong_alone) = reader_loop(&mut rd, w, a, a.mixed_secs);
    let stop = AtomicBool::new(false);
    let moves_before = wr.displacements();
    let ((with, with_cpu, wrong_with), (w_ops, w_full, w_secs, moves)) = std::thread::scope(|sc| {
        let writer = sc.spawn(|| {
            let mut present = vec![false; churn];
            let (mut ops, mut full) = (0u64, 0u64);
            let mut k = vec![0u8; w.kb];
            let mut v = vec![0u8; w.vb];
            let start = Instant::now();
            let mut c = 0;
            while !stop.load(Ordering::Relaxed) {
                let i = w.churn_base + c as u64;
                workload::key(i, w.seed, &mut k);
                if present[c] {
                    present[c] = !wr.remove(&k);
                } else {
                    workload::value(i, &mut v);
                    present[c] = wr.insert(&k, &v);
                    full += !present[c] as u64;
                }
                ops += 1;
                // Walk the churn keys in a scrambled order so inserts and deletes interleave.
                c = (c + 7919) % churn;
            }
            let moves = wr.displacements();
            (ops, full, start.elapsed().as_secs_f64(), moves)
        });
        let r = reader_loop(&mut rd, w, a, a.mixed_secs);
        stop.store(true, Ordering::Relaxed);
        (r, writer.join().expect("writer thread"))
    });
    let obj = row.as_object_mut().expect("row");
    obj.insert("reader_mops_alone".into(), json!(alone));
    obj.insert("reader_mops_with_writer".into(), json!(with));
    obj.insert(
        "reader_drop_pct".into(),
        json!(100.0 * (1.0 - with / alone)),
    );
    obj.insert("reader_mops_alone_cpu".into(), json!(alone_cpu));
    obj.insert("reader_mops_with_writer_cpu".into(), json!(with_cpu));
    obj.insert(
        "reader_drop_pct_cpu".into(),
        json!(100.0 * (1.0 - with_cpu / alone_cpu)),
    );
    obj.insert("wrong_answers".into(), json!(wrong_alone + wrong_with));
    obj.insert("writer_mops".into(), json!(w_ops as f64 / w_secs / 1e6));
    obj.insert("writer_failed_inserts".into(), json!(w_full));
    if let (Some(b), Some(e)) = (moves_before, moves) {
        obj.insert("displacements".into(), json!(e - b));
    }
}

/// Batched lookups over the access sequence for `secs`, every answer checked;
/// (Mops per wall second, Mops per CPU second of the reader thread, wrong answers).
fn reader_loop<R: FibReader>(rd: &mut R, w: &Workload, a: &Args, secs: f64) -> (f64, f64, u64) {
    let (kb, vb, b, l) = (w.kb, w.vb, a.batch, w.lookups());
    let mut vals = vec![0u8; b * vb];
    let mut found = vec![false; b];
    let (mut done, mut wrong, mut s) = (0usize, 0u64, 0usize);
    let cpu0 = thread_cpu_ns();
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            let m = b.min(l - s);
            rd.lookup_batch(
                &w.access[s * kb..(s + m) * kb],
                &mut vals[..m * vb],
                &mut found[..m],
            );
            wrong += w.check(s, &found[..m], &vals[..m * vb]);
            done += m;
            s += m;
            if s == l {
                s = 0;
            }
        }
        if start.elapsed().as_secs_f64() >= secs {
            break;
        }
    }
    let cpu_s = (thread_cpu_ns() - cpu0) as f64 / 1e9;
    (
        done as f64 / start.elapsed().as_secs_f64() / 1e6,
        done as f64 / cpu_s / 1e6,
        wrong,
    )
}

/// CPU time of the calling thread (ns), from /proc: on a shared machine, throughput per CPU
/// second is less noisy than per wall-clock second.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0)
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    json!({
        "cpu": cpu,
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "thp": thp.trim(),
    })
}

fn print_table(out: &Value) {
    println!("{}", out["params"]);
    println!(
        "{:<20} {:>10} {:>10} {:>10} {:>8} {:>8} {:>6} {:>10} {:>10} {:>6}",
        "name",
        "lookup M/s",
        "M/cpu-s",
        "insert M/s",
        "B/entry",
        "maxload",
        "page",
        "rd alone/cpu",
        "rd+wr/cpu",
        "wrong"
    );
    let f = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.2}"));
    for r in out["results"].as_array().into_iter().flatten() {
        println!(
            "{:<20} {:>10} {:>10} {:>10} {:>8} {:>8} {:>6} {:>10} {:>10} {:>6}",
            r["name"].as_str().unwrap_or(""),
            f(&r["lookup_mops"]),
            f(&r["lookup_mops_cpu"]),
            f(&r["insert_mops"]),
            f(&r["bytes_per_entry"]),
            f(&r["max_load_factor"]),
            r["page_size"].as_str().unwrap_or(""),
            f(&r["reader_mops_alone_cpu"]),
            f(&r["reader_mops_with_writer_cpu"]),
            r["verify_wrong"].as_u64().unwrap_or(0) + r["wrong_answers"].as_u64().unwrap_or(0),
        );
    }
    for n in out["notes"].as_array().into_iter().flatten() {
        println!("note: {}", n.as_str().unwrap_or(""));
    }
}
