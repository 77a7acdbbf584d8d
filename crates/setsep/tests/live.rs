//! `LiveSetSep`: the same answers, digests and images as a `SetSep` given the same deltas and
//! pieces; and a stress test of readers against a writer, every answer checked against an
//! oracle of each key's values over time.

mod common;

use common::{random_set, refs, splitmix};
use sb_setsep::{BuildOptions, Config, Growth, LiveSetSep, SetSep, Updatable};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn opts(config: Config, capacity: u64) -> BuildOptions {
    BuildOptions {
        config,
        value_bits: 2,
        threads: 1,
        seed: 0x11fe,
        build_id: 3,
        capacity,
        ..BuildOptions::default()
    }
}

/// Every lookup path of `live` agrees with `t` on `keys` (members or not).
fn same_answers(live: &LiveSetSep, t: &SetSep, keys: &[&[u8]]) {
    let hs: Vec<_> = keys.iter().map(|k| t.hash_key(k)).collect();
    let mut want = vec![0u16; keys.len()];
    t.lookup_batch_hashes(&hs, &mut want);
    let mut got = vec![u16::MAX; keys.len()];
    live.lookup_batch_hashes(&hs, &mut got);
    assert_eq!(got, want, "batched hash lookups");
    let mut got = vec![u16::MAX; keys.len()];
    live.lookup_batch(keys, &mut got);
    assert_eq!(got, want, "batched key lookups");
    for ((k, h), &w) in keys.iter().zip(&hs).zip(&want) {
        assert_eq!(live.hash_key(k), *h);
        assert_eq!(live.lookup(k), w);
        assert_eq!(live.lookup_hash(*h), w);
    }
}

fn same_table(live: &LiveSetSep, t: &SetSep) {
    assert_eq!(live.content_digest(), t.content_digest());
    assert_eq!(live.snapshot().to_bytes(), t.to_bytes());
    let (a, b) = (live.stats(), t.stats());
    assert_eq!(
        (a.keys, a.bits_per_key, a.fallback_keys, a.bytes, a.blocks),
        (b.keys, b.bits_per_key, b.fallback_keys, b.bytes, b.blocks)
    );
    assert_eq!(a.fallback_groups, b.fallback_groups);
    assert_eq!(
        (live.seq(), live.len(), live.fingerprint(), live.seed()),
        (t.seq(), t.len(), t.fingerprint(), t.seed())
    );
    assert_eq!(
        (live.num_blocks(), live.value_bits(), live.config()),
        (t.num_blocks(), t.value_bits(), t.config())
    );
}

/// A stream of inserts, value changes and removals (and, with growth, block re-balances)
/// applied to an owner's table copy and to a `LiveSetSep`: same answers, digest, image and
/// stats throughout; duplicates are no-ops and refused deltas change nothing.
#[test]
fn live_matches_setsep_through_deltas() {
    for (config, growth) in [
        (Config::C16_8, false),
        (Config::C8_16, false),
        (Config::C8_16, true),
        (Config::C16_16, false),
    ] {
        let (keys, values) = random_set(6000, 13, 2, 0x1111 + config.index_bits as u64);
        // Without growth, a fuller table: deltas move groups into and out of the fallback table.
        // With growth, a table near its growth load: inserts re-balance blocks (block deltas).
        let (n0, capacity) = if growth { (5500, 6144) } else { (3000, 4096) };
        let mut owner =
            Updatable::build(&refs(&keys[..n0]), &values[..n0], &opts(config, capacity)).unwrap();
        if growth {
            owner = owner.with_growth(Growth::default());
        }
        let mut mirror = owner.table().clone();
        let live = LiveSetSep::new(owner.table().clone());
        same_table(&live, &mirror);
        same_answers(&live, &mirror, &refs(&keys));
        let mut s = 0x5eed_u64 ^ config.array_bits as u64;
        let (mut blocks, mut fallbacks) = (0, 0);
        let mut last = None;
        for step in 0..1500 {
            let i = (splitmix(&mut s) % 6000) as usize;
            let d = if splitmix(&mut s) % 5 == 0 {
                owner.remove(&keys[i]).unwrap()
            } else {
                Some(
                    owner
                        .insert(&keys[i], (splitmix(&mut s) % 4) as u16)
                        .unwrap(),
                )
            };
            let Some(d) = d else { continue };
            blocks += d.is_block() as u32;
            fallbacks += d.touches_fallback() as u32;
            mirror.apply_delta(&d).unwrap();
            live.apply_delta(&d).unwrap();
            // The same delta again: a no-op; the previous one: stale, refused.
            live.apply_delta(&d).unwrap();
            if let Some(prev) = last.replace(d) {
                assert!(live.apply_delta(&prev).is_err());
            }
            if step % 300 == 0 {
                same_answers(&live, &mirror, &refs(&keys));
                same_table(&live, &mirror);
            }
        }
        same_answers(&live, &mirror, &refs(&keys));
        same_table(&live, &mirror);
        assert_eq!(owner.growths(), 0);
        assert_eq!(live.content_digest(), owner.table().content_digest());
        for (k, v) in owner.iter() {
            assert_eq!(live.lookup(&k), v);
        }
        if config == Config::C8_16 && !growth {
            assert!(
                fallbacks > 0,
                "{config}: no delta touched the fallback table"
            );
        }
        if growth {
            assert!(blocks > 0, "no block delta");
        }
    }
}

/// Owner deltas and pieces (several owners' way): the same as `SetSep`'s, and a piece of
/// another table is refused without a change.
#[test]
fn live_matches_setsep_through_owner_deltas_and_pieces() {
    let (keys, values) = random_set(5000, 16, 2, 0x2222);
    let o = opts(Config::C8_16, 8192);
    let mut owner = Updatable::build(&refs(&keys[..2500]), &values[..2500], &o).unwrap();
    let mut mirror = owner.table().clone();
    let live = LiveSetSep::new(owner.table().clone());
    let n_blocks = live.num_blocks();
    let mut s = 7u64;
    for round in 0..20 {
        let mut withheld = Vec::new();
        for _ in 0..40 {
            let i = (splitmix(&mut s) % 5000) as usize;
            if let Ok(d) = owner.insert(&keys[i], (splitmix(&mut s) % 4) as u16) {
                withheld.push(d);
            }
        }
        if round % 2 == 0 {
            for d in &withheld {
                mirror.apply_owner_delta(d).unwrap();
                live.apply_owner_delta(d).unwrap();
            }
        } else {
            let a = splitmix(&mut s) % n_blocks;
            let p = owner.piece(0..n_blocks).unwrap();
            mirror.install_piece(&p).unwrap();
            live.install_piece(&p).unwrap();
            // A sub-range again: nothing changes.
            let q = owner.piece(a..n_blocks).unwrap();
            live.install_piece(&q).unwrap();
        }
        assert_eq!(live.content_digest(), mirror.content_digest());
        assert_eq!(live.content_digest(), owner.table().content_digest());
    }
    same_answers(&live, &mirror, &refs(&keys));
    let other = Updatable::build(
        &[b"abcd".as_slice()],
        &[1],
        &BuildOptions { build_id: 4, ..o },
    )
    .unwrap();
    let before = live.content_digest();
    assert!(live.install_piece(&other.piece(0..1).unwrap()).is_err());
    let d = Updatable::build(
        &refs(&keys[..10]),
        &values[..10],
        &BuildOptions { build_id: 4, ..o },
    )
    .unwrap()
    .insert(&keys[0], 3)
    .unwrap();
    assert!(live.apply_owner_delta(&d).is_err());
    assert_eq!(live.content_digest(), before);
}

/// Each key's values over time: `(event, value)` from event 0 (the build) on; `None` while
/// the key is absent (its answer is then arbitrary).
type History = Vec<Mutex<Vec<(u64, Option<u16>)>>>;

/// Whether `got` is a value `key` had at some event in `e0..=e1` (or it was absent at one).
fn allowed(h: &[(u64, Option<u16>)], e0: u64, e1: u64, got: u16) -> bool {
    let start = h.iter().rposition(|&(e, _)| e <= e0).unwrap_or(0);
    h[start..]
        .iter()
        .take_while(|&&(e, _)| e <= e1)
        .any(|&(_, v)| v.is_none_or(|v| v == got))
}

/// One stress run: 2 readers look up every key in a loop (batched and single, alternating)
/// while a writer applies the owner deltas of a stream of inserts, value changes and removals,
/// and now and then withholds a few and installs a piece of the whole table instead. Before
/// event `e` is applied the writer records its value changes in the history, and after it
/// publishes `e`; a reader that read `e0` before a lookup and `e1` after accepts only a value
/// the key had at an event in `e0..=e1 + 1` (event `e1 + 1` may be in progress), so a key
/// that no event in the window changed must have its exact value.
/// Returns (events, lookups, deltas that edit the fallback table, block deltas).
fn stress(config: Config, growth: bool, run_for: Duration) -> (u64, u64, u64, u64) {
    let (keys, values) = random_set(6000, 13, 2, 0x3333 + growth as u64);
    let n0 = 3500;
    let capacity = if growth { 6144 } else { 4096 };
    let mut owner =
        Updatable::build(&refs(&keys[..n0]), &values[..n0], &opts(config, capacity)).unwrap();
    if growth {
        owner = owner.with_growth(Growth::default());
    }
    let live = Arc::new(LiveSetSep::new(owner.table().clone()));
    let hist: Arc<History> = Arc::new(
        (0..keys.len())
            .map(|i| Mutex::new(vec![(0, (i < n0).then(|| values[i]))]))
            .collect(),
    );
    let hashes: Arc<Vec<_>> = Arc::new(keys.iter().map(|k| live.hash_key(k)).collect());
    let published = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (live, hist, hashes) = (live.clone(), hist.clone(), hashes.clone());
            let (published, done) = (published.clone(), done.clone());
            std::thread::spawn(move || {
                const CHUNK: usize = 97;
                let mut out = [0u16; CHUNK];
                let mut lookups = 0u64;
                let mut round = 0usize;
                while !done.load(Ordering::Relaxed) {
                    for (c, hc) in hashes.chunks(CHUNK).enumerate() {
                        let e0 = published.load(Ordering::Acquire);
                        let o = &mut out[..hc.len()];
                        if (round + c + r) % 3 == 0 {
                            for (x, h) in o.iter_mut().zip(hc) {
                                *x = live.lookup_hash(*h);
                            }
                        } else {
                            live.lookup_batch_hashes(hc, o);
                        }
                        let e1 = published.load(Ordering::Acquire);
                        for (j, &got) in o.iter().enumerate() {
                            let i = c * CHUNK + j;
                            let h = hist[i].lock().unwrap();
                            assert!(
                                allowed(&h, e0, e1 + 1, got),
                                "key {i}: got {got} between events {e0} and {e1}: {h:?}"
                            );
                        }
                        lookups += hc.len() as u64;
                    }
                    round += 1;
                }
                lookups
            })
        })
        .collect();
    let n_blocks = live.num_blocks();
    let mut s = 0xabcdu64;
    let mut event = 0u64;
    let (mut fallbacks, mut blocks) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < run_for {
        let withhold = splitmix(&mut s) % 16 == 0;
        let ops = if withhold { 8 } else { 1 };
        let mut deltas = Vec::new();
        let mut changed = Vec::new();
        for _ in 0..ops {
            let i = (splitmix(&mut s) % keys.len() as u64) as usize;
            let (d, v) = if splitmix(&mut s) % 4 == 0 {
                (owner.remove(&keys[i]).unwrap(), None)
            } else {
                let v = (splitmix(&mut s) % 4) as u16;
                (Some(owner.insert(&keys[i], v).unwrap()), Some(v))
            };
            fallbacks += d.as_ref().is_some_and(|d| d.touches_fallback()) as u64;
            blocks += d.as_ref().is_some_and(|d| d.is_block()) as u64;
            deltas.extend(d);
            changed.push((i, v));
        }
        event += 1;
        for &(i, v) in &changed {
            hist[i].lock().unwrap().push((event, v));
        }
        if withhold {
            live.install_piece(&owner.piece(0..n_blocks).unwrap())
                .unwrap();
        } else {
            for d in &deltas {
                live.apply_owner_delta(d).unwrap();
            }
        }
        published.store(event, Ordering::Release);
    }
    done.store(true, Ordering::Relaxed);
    let lookups = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert_eq!(owner.growths(), 0);
    assert_eq!(live.content_digest(), owner.table().content_digest());
    let want: HashMap<sb_setsep::RibKey, u16> = owner.iter().collect();
    for (k, v) in want {
        assert_eq!(live.lookup(&k), v);
    }
    (event, lookups, fallbacks, blocks)
}

/// The stress test, about 6 s in all (`SB_LIVE_STRESS_SECS` sets the seconds per run).
#[test]
fn readers_racing_a_writer_see_old_or_new_values_only() {
    let secs: f64 = std::env::var("SB_LIVE_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    for (config, growth) in [
        (Config::C16_8, false),
        (Config::C8_16, false),
        (Config::C8_16, true),
    ] {
        let (events, lookups, fallbacks, blocks) =
            stress(config, growth, Duration::from_secs_f64(secs));
        eprintln!(
            "stress {config} growth={growth}: {events} events, {lookups} lookups, \
             {fallbacks} fallback deltas, {blocks} block deltas"
        );
        assert!(events > 10 && lookups > 10_000);
        if config == Config::C8_16 {
            assert!(if growth { blocks > 0 } else { fallbacks > 0 });
        }
    }
}

/// Redirects change every lookup path's answer for the redirected values alone, leave the
/// content alone, and are undone by an empty set.
#[test]
fn redirects_apply_to_every_lookup_path_and_only_to_their_values() {
    let (keys, values) = random_set(5000, 16, 2, 0x5e7);
    let t = Updatable::build(&refs(&keys), &values, &opts(Config::C16_8, 0))
        .unwrap()
        .table()
        .clone();
    let live = LiveSetSep::new(t.clone());
    let k = refs(&keys);
    same_answers(&live, &t, &k);
    // Value 2 goes to 3 (a gone handler's stand-in); 0, 1 and 3 are untouched.
    live.set_redirects(&[None, None, Some(3)]);
    assert_eq!(live.redirects(), vec![(2, 3)]);
    let hs: Vec<_> = k.iter().map(|x| t.hash_key(x)).collect();
    let mut batch = vec![0u16; k.len()];
    live.lookup_batch_hashes(&hs, &mut batch);
    let mut by_key = vec![0u16; k.len()];
    live.lookup_batch(&k, &mut by_key);
    for (i, key) in k.iter().enumerate() {
        let want = if values[i] == 2 { 3 } else { values[i] };
        assert_eq!(t.lookup(key), values[i]);
        assert_eq!(live.lookup(key), want);
        assert_eq!(live.lookup_hash(hs[i]), want);
        assert_eq!((batch[i], by_key[i]), (want, want));
    }
    same_table(&live, &t);
    live.set_redirects(&[]);
    assert!(live.redirects().is_empty());
    same_answers(&live, &t, &k);
}
