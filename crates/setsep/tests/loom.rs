//! loom models of `LiveSetSep`'s reader/writer protocol (a seqlock per block): a reader thread
//! looks keys up while the writer applies a delta or installs a piece, and must see each
//! changed key's old or new value, every unchanged key's exact value, and never go back to the
//! old value once it saw the new one. Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p sb-setsep --test loom --release`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use sb_setsep::{block_of_key, BuildOptions, Config, Delta, LiveSetSep, SetSep, Updatable};

const SEED: u64 = 0x100d;

fn opts(config: Config, value_bits: u8) -> BuildOptions {
    BuildOptions {
        config,
        value_bits,
        threads: 1,
        seed: SEED,
        build_id: 5,
        capacity: 2048, // two blocks
        ..BuildOptions::default()
    }
}

fn key(i: u32) -> [u8; 4] {
    i.to_le_bytes()
}

/// A two-block table of `n` keys (key `i` has value `i % 2^value_bits`).
struct Base {
    keys: Vec<[u8; 4]>,
    values: Vec<u16>,
    opts: BuildOptions,
}

impl Base {
    fn new(config: Config, value_bits: u8, n: u32) -> Base {
        let keys: Vec<[u8; 4]> = (0..n).map(key).collect();
        let values = (0..n).map(|i| (i % (1 << value_bits)) as u16).collect();
        Base {
            keys,
            values,
            opts: opts(config, value_bits),
        }
    }

    fn owner(&self) -> Updatable {
        let refs: Vec<&[u8]> = self.keys.iter().map(|k| k.as_slice()).collect();
        let u = Updatable::build(&refs, &self.values, &self.opts).unwrap();
        assert_eq!(u.table().num_blocks(), 2);
        u
    }

    /// The group of key `i` (the group its delta rewrites).
    fn group_of(&self, i: usize) -> u64 {
        self.owner()
            .insert(&self.keys[i], self.values[i])
            .unwrap()
            .group()
    }

    /// Keys of the group of key `i`, other than `i`.
    fn group_mates(&self, i: usize, n: usize) -> Vec<usize> {
        let g = self.group_of(i);
        let blk = block_of_key(&self.keys[i], SEED, 2);
        (0..self.keys.len())
            .filter(|&j| j != i && block_of_key(&self.keys[j], SEED, 2) == blk)
            .filter(|&j| self.group_of(j) == g)
            .take(n)
            .collect()
    }
}

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.max_branches = 100_000;
    b
}

/// What the reader of a model checks: `(key, allowed values)`; a key with one allowed value is
/// unchanged. The reader looks them all up batched, then (with `singles`) each one single, and
/// must not see an old value after a new one.
type Expect = Vec<([u8; 4], Vec<u16>)>;

fn model(
    table: SetSep,
    expect: Expect,
    singles: bool,
    write: impl Fn(&LiveSetSep) + Send + Sync + 'static,
) {
    let table = std::sync::Arc::new(table);
    let expect = std::sync::Arc::new(expect);
    let write = std::sync::Arc::new(write);
    builder().check(move || {
        let live = Arc::new(LiveSetSep::new((*table).clone()));
        let reader = {
            let (live, expect) = (live.clone(), expect.clone());
            thread::spawn(move || {
                let hs: Vec<_> = expect.iter().map(|(k, _)| live.hash_key(k)).collect();
                let mut out = vec![0u16; hs.len()];
                live.lookup_batch_hashes(&hs, &mut out);
                for ((h, (k, ok)), &got) in hs.iter().zip(expect.iter()).zip(&out) {
                    assert!(
                        ok.contains(&got),
                        "batched: key {k:?} gave {got}, allowed {ok:?}"
                    );
                    if !singles {
                        continue;
                    }
                    let again = live.lookup_hash(*h);
                    assert!(ok.contains(&again), "single: key {k:?} gave {again}");
                    if got == *ok.last().unwrap() {
                        assert_eq!(again, got, "key {k:?}: the new value, then the old");
                    }
                }
            })
        };
        write(&live);
        reader.join().unwrap();
        for (k, ok) in expect.iter() {
            assert_eq!(live.lookup(k), *ok.last().unwrap(), "after the write");
        }
    });
}

/// A value change (one group record rewritten) racing lookups of the key and of two keys of
/// its group.
#[test]
fn value_change_racing_lookups() {
    let base = Base::new(Config::C16_8, 2, 1500);
    let i = 7;
    let mates = base.group_mates(i, 2);
    assert_eq!(mates.len(), 2);
    let mut owner = base.owner();
    let table = owner.table().clone();
    let new = (base.values[i] + 1) % 4;
    let d: Delta = owner.insert(&base.keys[i], new).unwrap();
    let mut expect: Expect = vec![(base.keys[i], vec![base.values[i], new])];
    expect.extend(mates.iter().map(|&j| (base.keys[j], vec![base.values[j]])));
    model(table, expect, true, move |live| {
        live.apply_delta(&d).unwrap()
    });
}

/// A delta that moves a group into or out of the fallback table (8+16 fills groups): the
/// group's other keys are read from the record before and from the fallback table after (or
/// the reverse), exact throughout.
#[test]
fn fallback_delta_racing_lookups() {
    let base = Base::new(Config::C8_16, 2, 2000);
    // An insert of a new key whose delta edits the fallback table.
    let (j, d, table) = (10_000u32..20_000)
        .find_map(|j| {
            let mut owner = base.owner();
            let table = owner.table().clone();
            let d = owner.insert(&key(j), 1).unwrap();
            d.touches_fallback().then_some((j, d, table))
        })
        .expect("an insert that touches the fallback table");
    let g = d.group();
    let blk = block_of_key(&key(j), SEED, 2);
    let mates: Vec<usize> = (0..base.keys.len())
        .filter(|&m| block_of_key(&base.keys[m], SEED, 2) == blk && base.group_of(m) == g)
        .take(2)
        .collect();
    assert_eq!(mates.len(), 2);
    let expect: Expect = mates
        .iter()
        .map(|&m| (base.keys[m], vec![base.values[m]]))
        .collect();
    model(table, expect, true, move |live| {
        live.apply_owner_delta(&d).unwrap()
    });
}

/// A piece of both blocks (a resync) racing lookups: the piece was built from another key set
/// (the first 100 keys gone, one key's value flipped), so both blocks get new bucket choices
/// and records; an unchanged key of each block, looked up batched, must read exact throughout
/// (each block switches at once). (Fewer reads than the other models: the piece's ~70 stores
/// make each execution long.)
#[test]
fn piece_racing_lookups() {
    let base = Base::new(Config::C16_8, 1, 1200);
    let blk = |i: usize| block_of_key(&base.keys[i], SEED, 2);
    let a = (100..base.keys.len()).find(|&i| blk(i) == 0).unwrap();
    let u0 = (a + 1..base.keys.len()).find(|&i| blk(i) == 0).unwrap();

    let u1 = (100..base.keys.len()).find(|&i| blk(i) == 1).unwrap();
    let table = base.owner().table().clone();
    let refs: Vec<&[u8]> = base.keys[100..].iter().map(|k| k.as_slice()).collect();
    let mut values = base.values[100..].to_vec();
    values[a - 100] ^= 1;
    let other = Updatable::build(&refs, &values, &base.opts).unwrap();
    let piece = other.piece(0..2).unwrap();
    let mut changed = SetSep::from_bytes(&table.to_bytes()).unwrap();
    changed.install_piece(&piece).unwrap();
    assert_ne!(changed.content_digest(), table.content_digest());
    let expect: Expect = vec![
        (base.keys[u0], vec![base.values[u0]]),
        (base.keys[u1], vec![base.values[u1]]),
    ];
    model(table, expect, false, move |live| {
        live.install_piece(&piece).unwrap()
    });
}
