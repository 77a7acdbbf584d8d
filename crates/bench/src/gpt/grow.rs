//! `scalebricks-bench gpt --grow FROM:TO`: a SetSep owner ([`Updatable`] with
//! [`Updatable::with_growth`], the default [`Growth`]) built from FROM random keys, then given
//! the keys FROM..TO by inserts alone, `--batch` keys per [`Updatable::insert_batch`] call, and
//! a row at every doubling of the key count (2 FROM, 4 FROM, ...; and TO when it is not one).
//!
//! Each row covers the inserts since the previous one:
//! - `keys`, `fallback_ratio` (fallback keys / keys), `bits_per_key`, `blocks`: the owner's
//!   table after the last insert of the row;
//! - `insert_kops`: thousands of inserts per second of wall time, growth rebuilds and block
//!   re-balances included; the timed loop only moves each delta into a list (serializing it and
//!   the replica below are outside the timed loop);
//! - `delta_bytes_per_key`: what replicas receive per inserted key: the serialized size
//!   ([`sb_setsep::Delta::to_bytes`]) of every delta the owner emitted, plus, after each growth,
//!   the size of the grown table's image ([`SetSep::to_bytes`]), which a replica must load
//!   since the owner's later deltas carry the new block count. Deltas emitted in a batch in
//!   which the table grew are counted too, although the image already covers them (an owner
//!   sends them before it knows);
//! - `delta_bytes`, `image_bytes`, `growths`, `rebalances`: the same bytes split, and the
//!   owner's counters (cumulative).
//!
//! A replica follows the owner (it applies the deltas, or loads the image after a growth) and
//! must answer every inserted key like the owner at the end: `correct` and `wrong` say whether
//! it did.

use std::time::Instant;

use anyhow::{bail, Context};
use rand::{Rng, SeedableRng};
use sb_setsep::{BuildOptions, Config, Growth, SetSep, Updatable};
use serde::Serialize;

/// One row of the growth run; the field names are the JSON's.
#[derive(Serialize, Clone, Debug)]
pub(super) struct GrowRow {
    keys: u64,
    fallback_ratio: f64,
    bits_per_key: f64,
    blocks: u64,
    insert_kops: f64,
    delta_bytes_per_key: f64,
    delta_bytes: u64,
    image_bytes: u64,
    growths: u64,
    rebalances: u64,
}

/// Parses `FROM:TO` (FROM at least 1, TO above FROM).
pub(super) fn parse_range(s: &str) -> anyhow::Result<(usize, usize)> {
    let (a, b) = s
        .split_once(':')
        .with_context(|| format!("--grow: `{s}` is not FROM:TO"))?;
    let from: usize = a
        .trim()
        .parse()
        .with_context(|| format!("--grow: FROM `{a}`"))?;
    let to: usize = b
        .trim()
        .parse()
        .with_context(|| format!("--grow: TO `{b}`"))?;
    if from == 0 || to <= from {
        bail!("--grow: need 0 < FROM < TO, got {from}:{to}");
    }
    if to > u32::MAX as usize {
        bail!("--grow: at most 2^32 keys");
    }
    Ok((from, to))
}

/// Runs the growth benchmark; returns the rows and whether the replica answered every key
/// like the owner (and how many it did not).
pub(super) fn run(
    a: &super::Args,
    from: usize,
    to: usize,
    config: Config,
) -> anyhow::Result<(Vec<GrowRow>, u64)> {
    let (value_bits, key_bytes, seed) = (a.value_bits, a.key_bytes, a.seed);
    let (threads, batch) = (a.threads, a.batch);
    if !(8..=64).contains(&key_bytes) {
        bail!("--grow: --key-bytes must be 8 to 64");
    }
    let batch = batch.max(1);
    // Distinct keys: their first 8 bytes are a bijection of the index (as in `Work::generate`).
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let salt: u64 = rng.gen();
    let mut arena = vec![0u8; to * key_bytes];
    rng.fill(&mut arena[..]);
    for (i, k) in arena.chunks_exact_mut(key_bytes).enumerate() {
        k[..8].copy_from_slice(&super::mix64((i as u64).wrapping_add(salt)).to_le_bytes());
    }
    let keys: Vec<&[u8]> = arena.chunks_exact(key_bytes).collect();
    let mask = ((1u32 << value_bits) - 1) as u16;
    let values: Vec<u16> = (0..to).map(|_| rng.gen::<u16>() & mask).collect();
    let opts = BuildOptions {
        config,
        value_bits: value_bits as u8,
        threads,
        seed,
        build_id: 1,
        ..BuildOptions::default()
    };
    eprintln!("grow: building the owner from {from} keys");
    let mut owner = Updatable::build(&keys[..from], &values[..from], &opts)
        .context("building the owner")?
        .with_growth(Growth::default());
    let mut replica = SetSep::from_bytes(&owner.table().to_bytes()).context("replica load")?;
    let updates: Vec<(&[u8], u16)> = keys.iter().copied().zip(values.iter().copied()).collect();

    let mut rows = Vec::new();
    let mut deltas = Vec::with_capacity(batch);
    let (mut delta_bytes, mut image_bytes) = (0u64, 0u64);
    let mut at = from;
    let mut next_row = (from * 2).min(to);
    let (mut secs, mut row_delta, mut row_image, mut row_from) = (0f64, 0u64, 0u64, from);
    while at < to {
        let end = (at + batch).min(next_row);
        let growths = owner.growths();
        deltas.clear();
        let t = Instant::now();
        owner
            .insert_batch(&updates[at..end], |d| deltas.push(d))
            .with_context(|| format!("inserting keys {at}..{end}"))?;
        secs += t.elapsed().as_secs_f64();
        let sent: u64 = deltas.iter().map(|d| d.to_bytes().len() as u64).sum();
        row_delta += sent;
        if owner.growths() != growths {
            // The replica loads the grown image; this batch's deltas are in it.
            let image = owner.table().to_bytes();
            row_image += image.len() as u64;
            replica = SetSep::from_bytes(&image).context("replica: loading the grown image")?;
        } else {
            for d in &deltas {
                replica
                    .apply_delta(d)
                    .context("replica: applying a delta")?;
            }
        }
        at = end;
        if at == next_row {
            let st = owner.table().stats();
            let inserted = (at - row_from) as f64;
            rows.push(GrowRow {
                keys: st.keys,
                fallback_ratio: st.fallback_keys as f64 / st.keys.max(1) as f64,
                bits_per_key: st.bits_per_key,
                blocks: st.blocks,
                insert_kops: inserted / secs / 1e3,
                delta_bytes_per_key: (row_delta + row_image) as f64 / inserted,
                delta_bytes: row_delta,
                image_bytes: row_image,
                growths: owner.growths(),
                rebalances: owner.rebalances(),
            });
            eprintln!(
                "grow: {} keys, {} blocks, {} growths, {:.1} K inserts/s, {:.1} delta bytes/key",
                st.keys,
                st.blocks,
                owner.growths(),
                inserted / secs / 1e3,
                (row_delta + row_image) as f64 / inserted
            );
            delta_bytes += row_delta;
            image_bytes += row_image;
            (secs, row_delta, row_image, row_from) = (0.0, 0, 0, at);
            next_row = (at * 2).min(to);
        }
    }
    eprintln!("grow: {delta_bytes} delta bytes and {image_bytes} image bytes sent in all");
    // The replica, and the owner, answer every key.
    let mut got = vec![0u16; to];
    let mut wrong = 0u64;
    for t in [owner.table(), &replica] {
        t.lookup_batch(&keys, &mut got);
        wrong += got.iter().zip(&values).filter(|(a, b)| a != b).count() as u64;
    }
    if wrong > 0 {
        eprintln!("grow: {wrong} wrong answers (owner and replica together)");
    }
    Ok((rows, wrong))
}
