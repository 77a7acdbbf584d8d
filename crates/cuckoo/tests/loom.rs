//! loom models of the reader/writer protocol. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p sb-cuckoo --test loom --release`.
#![cfg(loom)]

use loom::thread;
use sb_cuckoo::{CuckooTable, Params};

/// Three 4-slot buckets, 4-byte keys.
fn params(value_bytes: usize) -> Params {
    let mut p = Params::new(4, value_bytes, 12).with_seed(0x5eed);
    p.slots_per_bucket = 4;
    p
}

/// The first `n` keys (4-byte ids from `from`) whose candidate buckets satisfy `f(b1, b2)`.
fn keys_where(p: &Params, from: u32, n: usize, f: impl Fn(usize, usize) -> bool) -> Vec<[u8; 4]> {
    (from..)
        .map(|i| i.to_le_bytes())
        .filter(|k| {
            let c = p.candidates(k);
            f(c.b1, c.b2)
        })
        .take(n)
        .collect()
}

/// Keys such that inserting `new` must move `x` between buckets 1 and 2 (the only way out of the
/// two full buckets 0 and 1): `a` fill bucket 0, `x` and `b` fill bucket 1. With `into_primary`,
/// `x`'s primary bucket is 2 (it sits in its alternate because `c` filled bucket 2 when it came;
/// one `c` key is removed afterwards) and the move goes into the bucket a lookup reads first:
/// the case where a reader that validated only one bucket at a time would miss `x`.
struct Scenario {
    c: Vec<[u8; 4]>,
    a: Vec<[u8; 4]>,
    x: [u8; 4],
    b: Vec<[u8; 4]>,
    new: [u8; 4],
}

fn scenario(p: &Params, into_primary: bool) -> Scenario {
    let inside = |b: usize| b <= 1;
    let a = keys_where(p, 0, 4, |b1, b2| b1 == 0 && inside(b2));
    let b = keys_where(p, 0, 3, |b1, b2| b1 == 1 && inside(b2));
    let (x, c) = if into_primary {
        let x = keys_where(p, 0, 1, |b1, b2| b1 == 2 && b2 == 1)[0];
        let c = keys_where(p, 1 << 16, 4, |b1, _| b1 == 2);
        (x, c)
    } else {
        (
            keys_where(p, 0, 1, |b1, b2| b1 == 1 && b2 == 2)[0],
            Vec::new(),
        )
    };
    let new = keys_where(p, 1 << 20, 1, |b1, b2| b1 != b2 && inside(b1) && inside(b2))[0];
    Scenario { c, a, x, b, new }
}

fn val(k: &[u8; 4], vb: usize) -> Vec<u8> {
    (0..vb).map(|i| k[i % 4] ^ i as u8).collect()
}

fn filled(p: Params, s: &Scenario) -> CuckooTable {
    let vb = p.value_bytes;
    let mut t = CuckooTable::new(p).unwrap();
    for k in
        s.c.iter()
            .chain(std::iter::once(&s.x))
            .chain(&s.a)
            .chain(&s.b)
    {
        assert!(t.insert(k, &val(k, vb)).unwrap());
    }
    if let Some(c0) = s.c.first() {
        assert!(t.remove(c0));
    }
    t
}

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b
}

#[test]
fn scenario_forces_a_displacement() {
    for into_primary in [false, true] {
        // Outside loom's scheduler nothing may touch a table; check the geometry only.
        let p = params(8);
        let s = scenario(&p, into_primary);
        assert_eq!(p.buckets(), 3);
        loom::model(move || {
            let mut t = filled(p, &s);
            let before = t.len();
            assert_eq!(before, if into_primary { 11 } else { 8 });
            assert!(t.insert(&s.new, &val(&s.new, 8)).unwrap());
            let mut buf = [0u8; 8];
            for k in
                s.c.iter()
                    .skip(1)
                    .chain(&s.a)
                    .chain([&s.x, &s.new])
                    .chain(&s.b)
            {
                assert!(t.lookup_into(k, &mut buf));
                assert_eq!(buf[..], val(k, 8)[..]);
            }
            let mut n = 0;
            t.for_each(|_, _| n += 1);
            assert_eq!(
                n,
                before + 1,
                "every key exactly once after the displacement"
            );
        });
    }
}

/// A displacement of x racing a single lookup of x, in both directions.
#[test]
fn displacement_racing_lookup() {
    for into_primary in [false, true] {
        let p = params(8);
        let s = scenario(&p, into_primary);
        builder().check(move || {
            let (mut w, r) = filled(p, &s).into_concurrent();
            let x = s.x;
            let reader = thread::spawn(move || {
                let mut buf = [0u8; 8];
                assert!(
                    r.lookup_into(&x, &mut buf),
                    "x missed during its displacement"
                );
                assert_eq!(buf[..], val(&x, 8)[..]);
            });
            assert!(w.insert(&s.new, &val(&s.new, 8)).unwrap());
            reader.join().unwrap();
        });
    }
}

/// An absent key (a 4-byte id from `from`) with x's buckets and tag class (`tag & 7`: the
/// overflow count the displacement changes).
fn absent_like(p: &Params, x: &[u8; 4], from: u32) -> [u8; 4] {
    let xc = p.candidates(x);
    (from..)
        .map(|i| i.to_le_bytes())
        .find(|k| {
            let c = p.candidates(k);
            (c.b1, c.b2) == (xc.b1, xc.b2) && c.tag & 7 == xc.tag & 7
        })
        .unwrap()
}

/// The same displacements racing a batched lookup of x, of a key that does not move and of an
/// absent key with x's buckets and tag class (a miss that reads the alternate bucket or not,
/// depending on when the displacement changes the class's overflow count).
#[test]
fn displacement_racing_batched_lookup() {
    for into_primary in [false, true] {
        let p = params(8);
        let s = scenario(&p, into_primary);
        let y = absent_like(&p, &s.x, 1 << 24);
        builder().check(move || {
            let (mut w, r) = filled(p, &s).into_concurrent();
            let (x, a0) = (s.x, s.a[0]);
            let reader = thread::spawn(move || {
                let keys = [x, a0, y].concat();
                let mut vals = [0u8; 24];
                let mut found = [true; 3];
                assert_eq!(r.lookup_batch(&keys, &mut vals, &mut found), 2);
                assert_eq!(found, [true, true, false]);
                assert_eq!(vals[..8], val(&x, 8)[..]);
                assert_eq!(vals[8..16], val(&a0, 8)[..]);
            });
            assert!(w.insert(&s.new, &val(&s.new, 8)).unwrap());
            reader.join().unwrap();
        });
    }
}

/// An update of a two-word value racing a lookup: the reader sees the old or the new value, never
/// a mix.
#[test]
fn update_racing_lookup() {
    let p = params(16);
    builder().check(move || {
        let mut t = CuckooTable::new(p).unwrap();
        t.insert(b"kkkk", &[1u8; 16]).unwrap();
        let (mut w, r) = t.into_concurrent();
        let reader = thread::spawn(move || {
            let mut buf = [0u8; 16];
            assert!(r.lookup_into(b"kkkk", &mut buf));
            assert!(buf == [1u8; 16] || buf == [2u8; 16], "torn value {buf:?}");
        });
        assert!(w.update(b"kkkk", &[2u8; 16]).unwrap());
        reader.join().unwrap();
    });
}

/// A delete racing a lookup: found with the full value, or not found.
#[test]
fn remove_racing_lookup() {
    let p = params(16);
    builder().check(move || {
        let mut t = CuckooTable::new(p).unwrap();
        t.insert(b"kkkk", &[3u8; 16]).unwrap();
        let (mut w, r) = t.into_concurrent();
        let reader = thread::spawn(move || {
            let mut buf = [0u8; 16];
            if r.lookup_into(b"kkkk", &mut buf) {
                assert_eq!(buf, [3u8; 16]);
            }
        });
        assert!(w.remove(b"kkkk"));
        reader.join().unwrap();
    });
}
