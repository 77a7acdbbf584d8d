//! Disk faults and the log's promises against an oracle: a torn last write at every byte
//! offset and as pages never written (recovered, nothing acknowledged lost), a lost log
//! (reported), a first start's initial state committed all or nothing (however large), and
//! random operation sequences with compaction and restarts, replayed into a `HashMap` and
//! compared with the oracle's, with the replay bounded by the checkpoint interval.

use proptest::prelude::*;
use sb_wal::{Lsn, SyncMode, Wal, WalError, WalOptions};
use std::collections::HashMap;
use std::fs;
use std::path::Path;

const SEG1: &str = "00000000000000000001.wal";

fn opts() -> WalOptions {
    WalOptions {
        identity: b"faults".to_vec(),
        sync: SyncMode::Never,
        ..WalOptions::default()
    }
}

/// Commits `batches` of records into a fresh log; returns the records and the file length
/// after each commit (the first entry: the segment header alone).
fn write_log(dir: &Path, batches: &[Vec<Vec<u8>>]) -> (Vec<Vec<u8>>, Vec<u64>) {
    let (mut wal, _) = Wal::open(dir, &opts()).unwrap();
    let mut all = Vec::new();
    let mut ends = vec![wal.log_bytes()];
    for b in batches {
        for r in b {
            wal.append(r).unwrap();
            all.push(r.clone());
        }
        wal.commit().unwrap();
        ends.push(wal.log_bytes());
    }
    (all, ends)
}

#[test]
fn a_torn_last_write_at_every_byte_and_as_unwritten_pages_loses_nothing_acknowledged() {
    let src = tempfile::tempdir().unwrap();
    let batches = vec![
        vec![b"one".to_vec(), b"two".to_vec()],
        vec![vec![7u8; 300], b"".to_vec(), vec![9u8; 5000]],
    ];
    let (records, ends) = write_log(src.path(), &batches);
    let good = fs::read(src.path().join(SEG1)).unwrap();
    let (last, end) = (ends[1] as usize, ends[2] as usize);
    let dir = tempfile::tempdir().unwrap();
    let seg = dir.path().join(SEG1);
    // The last commit never returned: the file ends anywhere inside its frame.
    for cut in last..end {
        fs::write(&seg, &good[..cut]).unwrap();
        let (mut wal, rec) = Wal::open(dir.path(), &opts()).unwrap();
        assert_eq!(rec.records, records[..2], "cut at {cut}");
        assert_eq!(rec.torn_tail_bytes, (cut - last) as u64);
        // The torn bytes are gone and the log goes on after the acknowledged records.
        assert_eq!(fs::metadata(&seg).unwrap().len(), last as u64);
        assert_eq!(wal.append(b"again").unwrap(), 3);
        wal.commit().unwrap();
    }
    // The file was extended but pages of the frame never written (they read as zeros): the
    // first page (the header) or the last (the trailer), 4 KiB pages of the file.
    let first_page_end = (last / 4096 + 1) * 4096;
    let last_page_start = (end - 1) / 4096 * 4096;
    assert!(first_page_end <= last_page_start, "the frame spans pages");
    for (from, to) in [(last, first_page_end), (last_page_start, end), (last, end)] {
        let mut b = good.clone();
        b[from..to].fill(0);
        fs::write(&seg, &b).unwrap();
        let (_, rec) = Wal::open(dir.path(), &opts()).unwrap();
        assert_eq!(rec.records, records[..2], "zeros {from}..{to}");
        assert_eq!(rec.torn_tail_bytes, (end - last) as u64);
    }
    // Whole: everything.
    fs::write(&seg, &good).unwrap();
    let (_, rec) = Wal::open(dir.path(), &opts()).unwrap();
    assert_eq!(rec.records, records);
}

#[test]
fn a_damaged_last_commit_is_refused_until_discarded_explicitly() {
    let dir = tempfile::tempdir().unwrap();
    let batches = vec![vec![b"a".to_vec()], vec![b"b".to_vec(), b"c".to_vec()]];
    let (_, ends) = write_log(dir.path(), &batches);
    let seg = dir.path().join(SEG1);
    let mut b = fs::read(&seg).unwrap();
    b[ends[1] as usize + 45] ^= 0x08; // in the last frame's body
    fs::write(&seg, &b).unwrap();
    for _ in 0..2 {
        match Wal::open(dir.path(), &opts()) {
            Err(e @ WalError::Damaged { .. }) => {
                let WalError::Damaged {
                    offset,
                    last_good_lsn,
                    ..
                } = e
                else {
                    unreachable!()
                };
                assert_eq!((offset, last_good_lsn), (ends[1], 1));
            }
            other => panic!("{:?}", other.map(|(_, r)| r)),
        }
        assert_eq!(fs::read(&seg).unwrap(), b, "nothing truncated");
    }
    // Keeping records of the damaged commit: refused.
    for keep in [2, 3] {
        assert!(matches!(
            Wal::discard_after(dir.path(), &opts(), keep),
            Err(WalError::Damaged {
                last_good_lsn: 1,
                ..
            })
        ));
    }
    // The repair a replication layer does: cut after the last good LSN, then fetch the rest.
    let removed = Wal::discard_after(dir.path(), &opts(), 1).unwrap();
    assert_eq!(removed, ends[2] - ends[1]);
    let (mut wal, rec) = Wal::open(dir.path(), &opts()).unwrap();
    assert_eq!(rec.records, vec![b"a".to_vec()]);
    assert_eq!(wal.append(b"b from a replica").unwrap(), 2);
    assert_eq!(wal.append(b"c from a replica").unwrap(), 3);
    wal.commit().unwrap();
    drop(wal);
    // Not at a commit boundary (2 and 3 are one commit): refused; at one: done.
    assert!(matches!(
        Wal::discard_after(dir.path(), &opts(), 2),
        Err(WalError::BadOptions(_))
    ));
    assert_eq!(Wal::discard_after(dir.path(), &opts(), 3).unwrap(), 0);
    let (_, rec) = Wal::open(dir.path(), &opts()).unwrap();
    assert_eq!(rec.last_lsn, 3);
}

#[test]
fn a_lost_log_is_reported_as_created_or_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let (_, rec) = Wal::open(&log, &opts()).unwrap();
    assert!(rec.created);
    write_log(&log, &[vec![b"x".to_vec()]]);
    let (_, rec) = Wal::open(&log, &opts()).unwrap();
    assert!(!rec.created && rec.last_lsn == 1);
    // Wiped: an empty log again, which says so (the caller, which acknowledged records
    // before, rejoins as a new replica instead of taking it for its state).
    fs::remove_dir_all(&log).unwrap();
    let (_, rec) = Wal::open(&log, &opts()).unwrap();
    assert!(rec.created && rec.last_lsn == 0);
    // Wiped, with creation off (a node that knows it had a log): a typed error.
    fs::remove_dir_all(&log).unwrap();
    let no_create = WalOptions {
        create: false,
        ..opts()
    };
    assert!(matches!(
        Wal::open(&log, &no_create),
        Err(WalError::NotFound(_))
    ));
    // The segment lost but the directory kept: also an empty log, created.
    write_log(&log, &[vec![b"y".to_vec()]]);
    fs::remove_file(log.join(SEG1)).unwrap();
    let (_, rec) = Wal::open(&log, &opts()).unwrap();
    assert!(rec.created && rec.last_lsn == 0);
}

/// A node's first start persists its whole initial state (an epoch, every initial flow, an end
/// marker) in one batch. Before, the default batch limit was 64 MiB and the driver committed
/// early when a batch went past it: a crash between those commits left the initial flows half
/// written, and the restart either lost the rest or, given the flows again, logged them a
/// second time after the first half ("key given twice" at the next replay). Now the batch is
/// one commit, all or nothing, however large: cut anywhere, nothing of it is recovered.
#[test]
fn a_first_start_larger_than_the_old_batch_limit_is_one_commit_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, rec) = Wal::open(dir.path(), &opts()).unwrap();
    assert!(rec.created);
    let header = wal.log_bytes();
    let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i * 7) as u8).collect();
    wal.append(b"epoch 1").unwrap();
    for _ in 0..66 {
        // 66 MiB of initial flows: past the old 64 MiB limit.
        wal.append(&chunk).unwrap();
    }
    wal.append(b"base end").unwrap();
    assert_eq!(wal.commit().unwrap(), 68);
    assert_eq!(wal.stats().commits, 1);
    let end = wal.log_bytes();
    drop(wal);
    let good = fs::read(dir.path().join(SEG1)).unwrap();
    let frame = end - header;
    for cut in [
        header + 1,
        header + 40,
        header + 41,
        header + frame / 2,
        end - 24,
        end - 1,
    ] {
        fs::write(dir.path().join(SEG1), &good[..cut as usize]).unwrap();
        let (_, rec) = Wal::open(dir.path(), &opts()).unwrap();
        assert!(rec.records.is_empty(), "cut at {cut}");
        assert_eq!(rec.torn_tail_bytes, cut - header);
    }
    fs::write(dir.path().join(SEG1), &good).unwrap();
    let (_, rec) = Wal::open(dir.path(), &opts()).unwrap();
    assert_eq!(rec.records.len(), 68);
    assert_eq!(rec.records.last().unwrap(), b"base end");
}

/// An operation of the random sequences.
#[derive(Debug, Clone)]
enum Op {
    Put(u8, u8),
    Del(u8),
    Commit,
    /// Crash: the process dies; what was appended and not committed is gone.
    Crash,
    /// A clean restart: commit, close, open.
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..16, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        2 => (0u8..16).prop_map(Op::Del),
        3 => Just(Op::Commit),
        1 => Just(Op::Crash),
        1 => Just(Op::Restart),
    ]
}

fn encode_state(m: &HashMap<u8, u8>) -> Vec<u8> {
    let mut v: Vec<(u8, u8)> = m.iter().map(|(&k, &v)| (k, v)).collect();
    v.sort_unstable();
    v.into_iter().flat_map(|(k, v)| [k, v]).collect()
}

/// What a restart rebuilds: the snapshot, then the records.
fn replay(rec: &sb_wal::Recovery) -> HashMap<u8, u8> {
    let mut m = HashMap::new();
    if let Some(s) = &rec.snapshot {
        for kv in s.data.chunks(2) {
            m.insert(kv[0], kv[1]);
        }
    }
    for (_, r) in rec.iter() {
        match r {
            [b'p', k, v] => {
                m.insert(*k, *v);
            }
            [b'd', k] => {
                m.remove(k);
            }
            other => panic!("bad record {other:?}"),
        }
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Random puts, deletes, commits, crashes and restarts, with a checkpoint whenever one is
    /// due after a commit (every `every` records): after each restart the replayed state equals
    /// the oracle's state as of the last commit, and the replay holds fewer than `every`
    /// records (a crash between a commit and its checkpoint would add that commit's records).
    #[test]
    fn compaction_and_restarts_replay_to_the_oracle(
        ops in proptest::collection::vec(op(), 1..120),
        every in 1u64..12,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let o = WalOptions { checkpoint_records: every, ..opts() };
        let (mut wal, _) = Wal::open(dir.path(), &o).unwrap();
        // `live`: the state with everything appended; `durable`: as of the last commit.
        let (mut live, mut durable) = (HashMap::new(), HashMap::new());
        let mut biggest_commit = 0u64; // for the failure message
        let mut pending = 0u64;
        let mut last: Lsn = 0;
        for op in ops {
            match op {
                Op::Put(k, v) => {
                    last = wal.append(&[b'p', k, v]).unwrap();
                    live.insert(k, v);
                    pending += 1;
                }
                Op::Del(k) => {
                    last = wal.append(&[b'd', k]).unwrap();
                    live.remove(&k);
                    pending += 1;
                }
                Op::Commit => {
                    prop_assert_eq!(wal.commit().unwrap(), last);
                    durable = live.clone();
                    biggest_commit = biggest_commit.max(pending);
                    pending = 0;
                    if wal.checkpoint_due() {
                        prop_assert_eq!(wal.checkpoint(&encode_state(&live)).unwrap(), last);
                        prop_assert_eq!(wal.records_since_checkpoint(), 0);
                    }
                }
                Op::Crash | Op::Restart => {
                    if matches!(op, Op::Restart) {
                        wal.commit().unwrap();
                        durable = live.clone();
                        biggest_commit = biggest_commit.max(pending);
                        if wal.checkpoint_due() {
                            wal.checkpoint(&encode_state(&live)).unwrap();
                        }
                    }
                    pending = 0;
                    drop(wal);
                    let (w, rec) = Wal::open(dir.path(), &o).unwrap();
                    wal = w;
                    prop_assert_eq!(rec.torn_tail_bytes, 0);
                    prop_assert_eq!(replay(&rec), durable.clone());
                    prop_assert!(
                        (rec.records.len() as u64) < every,
                        "replay of {} records, checkpoint every {}, commits of up to {}",
                        rec.records.len(), every, biggest_commit
                    );
                    live = durable.clone();
                    last = rec.last_lsn;
                }
            }
        }
    }
}
