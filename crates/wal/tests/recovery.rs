//! Recovery from every kind of damage: a log cut at every byte, flipped bits in the middle and
//! at the end, zeros after the end, interrupted checkpoints, missing files, random bytes.

use proptest::prelude::*;
use sb_wal::{Lsn, SyncMode, Wal, WalError, WalOptions};
use std::fs;
use std::path::{Path, PathBuf};

const SEG1: &str = "00000000000000000001.wal";

fn opts() -> WalOptions {
    WalOptions {
        identity: b"cluster 1 node 0".to_vec(),
        sync: SyncMode::Never,
        ..WalOptions::default()
    }
}

fn payload(lsn: Lsn, len: usize) -> Vec<u8> {
    (0..len).map(|i| (lsn as usize * 31 + i) as u8).collect()
}

/// Writes `batches` (record lengths per commit) into a fresh log in `dir`; returns every
/// record and the file length after each commit.
fn write_log(dir: &Path, batches: &[Vec<usize>]) -> (Vec<Vec<u8>>, Vec<u64>) {
    let (mut wal, rec) = Wal::open(dir, &opts()).unwrap();
    assert_eq!(rec.last_lsn, 0);
    let header_len = wal.log_bytes();
    let mut records = Vec::new();
    let mut ends = vec![header_len];
    for batch in batches {
        for &len in batch {
            let lsn = wal.last_lsn() + 1;
            let p = payload(lsn, len);
            assert_eq!(wal.append(&p).unwrap(), lsn);
            records.push(p);
        }
        assert_eq!(wal.commit().unwrap(), records.len() as Lsn);
        ends.push(wal.log_bytes());
    }
    (records, ends)
}

fn seg_path(dir: &Path) -> PathBuf {
    dir.join(SEG1)
}

#[test]
fn records_survive_reopen_and_uncommitted_ones_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let (records, ends) = write_log(dir.path(), &[vec![3, 0, 10], vec![1], vec![100; 20]]);
    let (mut wal, rec) = Wal::open(dir.path(), &opts()).unwrap();
    assert_eq!(rec.records, records);
    assert_eq!(
        (rec.first_lsn, rec.last_lsn, rec.torn_tail_bytes),
        (1, 24, 0)
    );
    assert_eq!(wal.log_bytes(), *ends.last().unwrap());
    assert_eq!(
        fs::metadata(seg_path(dir.path())).unwrap().len(),
        wal.log_bytes()
    );
    wal.append(b"never committed").unwrap();
    assert_eq!(
        (wal.last_lsn(), wal.durable_lsn(), wal.pending_records()),
        (25, 24, 1)
    );
    drop(wal);
    let (wal, rec) = Wal::open(dir.path(), &opts()).unwrap();
    assert_eq!(rec.records, records);
    assert_eq!(wal.last_lsn(), 24);
}

#[test]
fn a_commit_of_nothing_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), &opts()).unwrap();
    let len = wal.log_bytes();
    assert_eq!(wal.commit().unwrap(), 0);
    assert_eq!((wal.log_bytes(), wal.stats().commits), (len, 0));
}

#[test]
fn damage_to_any_acknowledged_commit_is_an_error_and_nothing_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let (_, ends) = write_log(dir.path(), &[vec![8, 8], vec![8], vec![8, 8, 8]]);
    let counts = [0u64, 2, 3, 6];
    let good = fs::read(seg_path(dir.path())).unwrap();
    // A flipped bit in any byte of any frame, the last included: every commit returned, so
    // every frame is acknowledged. An error naming the frame's offset and the last good LSN;
    // the file is left as it was.
    for k in 0..ends.len() - 1 {
        for at in ends[k]..ends[k + 1] {
            let mut b = good.clone();
            b[at as usize] ^= 1 << (at % 8);
            fs::write(seg_path(dir.path()), &b).unwrap();
            match Wal::open(dir.path(), &opts()) {
                Err(WalError::Damaged {
                    offset,
                    last_good_lsn,
                    ..
                }) => {
                    assert_eq!(offset, ends[k], "flip at {at}");
                    assert_eq!(last_good_lsn, counts[k], "flip at {at}");
                }
                other => panic!("flip at {at}: {:?}", other.map(|(_, r)| r)),
            }
            assert_eq!(fs::read(seg_path(dir.path())).unwrap(), b);
        }
    }
    // The segment header: an error.
    let mut b = good.clone();
    b[20] ^= 1;
    fs::write(seg_path(dir.path()), &b).unwrap();
    assert!(matches!(
        Wal::open(dir.path(), &opts()),
        Err(WalError::Corrupt { .. })
    ));
}

#[test]
fn zeros_after_the_end_are_a_torn_tail_and_appends_continue_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut records, ends) = write_log(dir.path(), &[vec![5, 6], vec![7]]);
    let mut b = fs::read(seg_path(dir.path())).unwrap();
    b.extend_from_slice(&[0u8; 5000]);
    fs::write(seg_path(dir.path()), &b).unwrap();
    let (mut wal, rec) = Wal::open(dir.path(), &opts()).unwrap();
    assert_eq!(
        (rec.records.clone(), rec.torn_tail_bytes),
        (records.clone(), 5000)
    );
    assert_eq!(wal.append(b"after").unwrap(), 4);
    wal.commit().unwrap();
    records.push(b"after".to_vec());
    drop(wal);
    let (_, rec) = Wal::open(dir.path(), &opts()).unwrap();
    assert_eq!((rec.records, rec.torn_tail_bytes), (records, 0));
    assert!(fs::metadata(seg_path(dir.path())).unwrap().len() > *ends.last().unwrap());
}

#[test]
fn identity_lock_options_and_batch_limits() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), &[vec![1]]);
    let other = WalOptions {
        identity: b"cluster 1 node 1".to_vec(),
        ..opts()
    };
    assert!(matches!(
        Wal::open(dir.path(), &other),
        Err(WalError::IdentityMismatch { .. })
    ));

    let wal = Wal::open(dir.path(), &opts()).unwrap().0;
    assert!(matches!(
        Wal::open(dir.path(), &opts()),
        Err(WalError::Locked(_))
    ));

    let missing = dir.path().join("missing");
    let no_create = WalOptions {
        create: false,
        ..opts()
    };
    assert!(matches!(
        Wal::open(&missing, &no_create),
        Err(WalError::NotFound(_))
    ));
    let bad = WalOptions {
        max_batch_bytes: 0,
        ..opts()
    };
    assert!(matches!(
        Wal::open(&missing, &bad),
        Err(WalError::BadOptions(_))
    ));
    drop(wal);

    let small = WalOptions {
        max_batch_bytes: 100,
        ..opts()
    };
    let (mut wal, _) = Wal::open(dir.path(), &small).unwrap();
    assert_eq!(wal.append(&[1; 50]).unwrap(), 2);
    assert!(matches!(
        wal.append(&[1; 50]),
        Err(WalError::BatchFull { len: 50, max: 100 })
    ));
    assert_eq!(wal.commit().unwrap(), 2);
    assert!(matches!(
        wal.append(&[1; 97]),
        Err(WalError::BatchFull { .. })
    ));
    assert_eq!(wal.append(&[1; 96]).unwrap(), 3);
    assert_eq!(wal.commit().unwrap(), 3);
}

#[test]
fn checkpoints_replace_the_log_and_survive_interruption_at_each_step() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mut wal, _) = Wal::open(d, &opts()).unwrap();
    for i in 1..=10u64 {
        wal.append(&i.to_le_bytes()).unwrap();
    }
    wal.commit().unwrap();
    let old_segment = fs::read(seg_path(d)).unwrap();
    wal.append(b"pending, in the snapshot").unwrap();
    assert_eq!(wal.checkpoint(b"state at 11").unwrap(), 11);
    assert_eq!((wal.durable_lsn(), wal.pending_records()), (11, 0));
    assert!(!seg_path(d).exists());
    assert_eq!(
        wal.log_bytes(),
        fs::metadata(d.join("00000000000000000012.wal"))
            .unwrap()
            .len()
    );
    assert!(wal.snapshot_bytes() > 11);
    assert_eq!(wal.append(b"twelve").unwrap(), 12);
    wal.commit().unwrap();
    drop(wal);

    let check = |rec: &sb_wal::Recovery| {
        let s = rec.snapshot.as_ref().unwrap();
        assert_eq!((s.lsn, s.data.as_slice()), (11, &b"state at 11"[..]));
        assert_eq!(rec.iter().collect::<Vec<_>>(), vec![(12, &b"twelve"[..])]);
        assert_eq!(rec.last_lsn, 12);
    };
    let (_, rec) = Wal::open(d, &opts()).unwrap();
    check(&rec);

    // Interrupted after the snapshot, before the old segment was removed: it is obsolete.
    fs::write(seg_path(d), &old_segment).unwrap();
    fs::write(d.join("snapshot.tmp"), b"half a snapshot").unwrap();
    let (wal, rec) = Wal::open(d, &opts()).unwrap();
    check(&rec);
    assert!(!seg_path(d).exists() && !d.join("snapshot.tmp").exists());
    drop(wal);

    // Interrupted after the snapshot, before the new segment was made: the old segment ends
    // before the snapshot, so a new one starts after it.
    fs::remove_file(d.join("00000000000000000012.wal")).unwrap();
    fs::write(seg_path(d), &old_segment).unwrap();
    let (mut wal, rec) = Wal::open(d, &opts()).unwrap();
    assert_eq!((rec.last_lsn, rec.records.len()), (11, 0));
    assert!(!seg_path(d).exists());
    assert_eq!(wal.append(b"twelve again").unwrap(), 12);
    wal.commit().unwrap();
    drop(wal);

    // A lost snapshot is a gap, not an empty state.
    fs::remove_file(d.join("snapshot")).unwrap();
    match Wal::open(d, &opts()) {
        Err(WalError::Gap {
            expected: 1,
            found: 12,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_checkpoint_with_nothing_pending_can_keep_the_old_segment() {
    // Interrupted between the snapshot's rename and the new segment: the old segment ends
    // exactly at the snapshot and stays the active one.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (records, _) = write_log(d, &[vec![4, 4]]);
    let old = fs::read(seg_path(d)).unwrap();
    let (mut wal, _) = Wal::open(d, &opts()).unwrap();
    wal.checkpoint(b"two").unwrap();
    drop(wal);
    fs::remove_file(d.join("00000000000000000003.wal")).unwrap();
    fs::write(seg_path(d), &old).unwrap();
    let (mut wal, rec) = Wal::open(d, &opts()).unwrap();
    assert_eq!((rec.last_lsn, rec.records.len(), records.len()), (2, 0, 2));
    assert_eq!(wal.append(b"3").unwrap(), 3);
    wal.commit().unwrap();
    drop(wal);
    let (_, rec) = Wal::open(d, &opts()).unwrap();
    assert_eq!(rec.iter().collect::<Vec<_>>(), vec![(3, &b"3"[..])]);
}

#[test]
fn checkpoints_back_to_back_and_on_an_empty_log() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mut wal, _) = Wal::open(d, &opts()).unwrap();
    assert_eq!(wal.checkpoint(b"empty").unwrap(), 0);
    assert_eq!(wal.checkpoint(b"still empty").unwrap(), 0);
    wal.append(b"1").unwrap();
    assert_eq!(wal.checkpoint(b"one").unwrap(), 1);
    assert_eq!(wal.checkpoint(b"one again").unwrap(), 1);
    assert_eq!(wal.append(b"2").unwrap(), 2);
    assert_eq!(wal.commit().unwrap(), 2);
    assert_eq!(wal.stats().checkpoints, 4);
    drop(wal);
    let segments: Vec<_> = fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".wal"))
        .collect();
    assert_eq!(segments, vec!["00000000000000000002.wal".to_string()]);
    let (_, rec) = Wal::open(d, &opts()).unwrap();
    assert_eq!(rec.snapshot.as_ref().unwrap().data, b"one again");
    assert_eq!(rec.iter().collect::<Vec<_>>(), vec![(2, &b"2"[..])]);
}

#[test]
fn segments_chain_without_gaps_and_only_the_last_may_be_torn() {
    // Segment 1 holds records 1..=3; segment 4, made in another log, records 4 and 5.
    let a = tempfile::tempdir().unwrap();
    let (records, _) = write_log(a.path(), &[vec![1, 2], vec![3]]);
    let b = tempfile::tempdir().unwrap();
    let (mut wal, _) = Wal::open(b.path(), &opts()).unwrap();
    for r in &records {
        wal.append(r).unwrap();
    }
    wal.checkpoint(b"").unwrap();
    wal.append(b"four").unwrap();
    wal.append(b"five").unwrap();
    wal.commit().unwrap();
    drop(wal);
    let seg4 = "00000000000000000004.wal";
    fs::copy(b.path().join(seg4), a.path().join(seg4)).unwrap();

    let (wal, rec) = Wal::open(a.path(), &opts()).unwrap();
    assert_eq!((rec.segments, rec.last_lsn, rec.records.len()), (2, 5, 5));
    assert_eq!(rec.records[3..], [b"four".to_vec(), b"five".to_vec()]);
    let on_disk = fs::metadata(seg_path(a.path())).unwrap().len()
        + fs::metadata(a.path().join(seg4)).unwrap().len();
    assert_eq!(wal.log_bytes(), on_disk);
    drop(wal);

    // A torn tail in the first segment is damage.
    let good = fs::read(seg_path(a.path())).unwrap();
    let mut torn = good.clone();
    torn.extend_from_slice(&[0; 10]);
    fs::write(seg_path(a.path()), &torn).unwrap();
    assert!(matches!(
        Wal::open(a.path(), &opts()),
        Err(WalError::Damaged { offset, last_good_lsn: 3, .. }) if offset == good.len() as u64
    ));
    // A missing first segment is a gap.
    fs::remove_file(seg_path(a.path())).unwrap();
    assert!(matches!(
        Wal::open(a.path(), &opts()),
        Err(WalError::Gap {
            expected: 1,
            found: 4,
            ..
        })
    ));
}

#[test]
fn sync_data_mode_works() {
    let dir = tempfile::tempdir().unwrap();
    let o = WalOptions {
        sync: SyncMode::Data,
        ..opts()
    };
    let (mut wal, _) = Wal::open(dir.path().join("sub"), &o).unwrap();
    wal.append(b"a").unwrap();
    assert_eq!(wal.commit().unwrap(), 1);
    wal.checkpoint(b"s").unwrap();
    wal.append(b"b").unwrap();
    wal.commit().unwrap();
    drop(wal);
    let (_, rec) = Wal::open(dir.path().join("sub"), &o).unwrap();
    assert_eq!(
        (rec.snapshot.unwrap().lsn, rec.records),
        (1, vec![b"b".to_vec()])
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// A log cut at every byte offset recovers exactly the records of the commits wholly before
    /// the cut, never part of one; the cut bytes are reported torn; the log then takes appends.
    #[test]
    fn cut_at_every_byte_recovers_exactly_the_whole_commits_before_it(
        batches in proptest::collection::vec(proptest::collection::vec(0usize..40, 1..5), 1..6),
    ) {
        let src = tempfile::tempdir().unwrap();
        let (records, ends) = write_log(src.path(), &batches);
        let good = fs::read(seg_path(src.path())).unwrap();
        prop_assert_eq!(good.len() as u64, *ends.last().unwrap());
        let mut counts = vec![0usize];
        for b in &batches {
            counts.push(counts.last().unwrap() + b.len());
        }
        let dir = tempfile::tempdir().unwrap();
        for cut in 0..=good.len() {
            fs::write(seg_path(dir.path()), &good[..cut]).unwrap();
            let opened = Wal::open(dir.path(), &opts());
            if (cut as u64) < ends[0] {
                let is_corrupt = matches!(opened, Err(WalError::Corrupt { .. }));
                prop_assert!(is_corrupt, "cut {}: {:?}", cut, opened.map(|(_, r)| r));
                continue;
            }
            let (mut wal, rec) = opened.unwrap();
            let k = ends.iter().rposition(|&e| e <= cut as u64).unwrap();
            prop_assert_eq!(&rec.records[..], &records[..counts[k]], "cut {}", cut);
            prop_assert_eq!(rec.torn_tail_bytes, cut as u64 - ends[k]);
            prop_assert_eq!(wal.log_bytes(), ends[k]);
            if cut % 7 == 0 || cut == good.len() {
                let lsn = wal.append(b"next").unwrap();
                prop_assert_eq!(lsn, counts[k] as u64 + 1);
                wal.commit().unwrap();
                drop(wal);
                let (_, rec) = Wal::open(dir.path(), &opts()).unwrap();
                prop_assert_eq!(rec.records.len(), counts[k] + 1);
                prop_assert_eq!(rec.torn_tail_bytes, 0);
            }
        }
    }

    /// Random bytes as a segment, after a valid header, inside a frame with valid checksums, and
    /// as a snapshot: never a panic, and whatever opens reopens the same and takes appends.
    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        let dir = tempfile::tempdir().unwrap();
        sb_wal::fuzzing::open_bytes(dir.path(), &data);
    }

    /// A valid log with one byte changed, anywhere: always an error (every commit written was
    /// acknowledged), naming the damaged frame and the last good LSN before it.
    #[test]
    fn one_changed_byte_is_caught(
        batches in proptest::collection::vec(proptest::collection::vec(0usize..30, 1..4), 1..5),
        at in any::<prop::sample::Index>(),
        xor in 1u8..=255,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (records, ends) = write_log(dir.path(), &batches);
        let mut b = fs::read(seg_path(dir.path())).unwrap();
        let at = at.index(b.len());
        b[at] ^= xor;
        fs::write(seg_path(dir.path()), &b).unwrap();
        match Wal::open(dir.path(), &opts()) {
            Ok((_, rec)) => prop_assert!(false, "damage at {} was accepted: {:?}", at, rec),
            Err(WalError::Damaged { offset, last_good_lsn, .. }) => {
                // The frame holding the changed byte, and the records before it.
                let k = ends.iter().rposition(|&e| e <= at as u64).unwrap();
                prop_assert_eq!(offset, ends[k]);
                let before: usize = batches[..k].iter().map(Vec::len).sum();
                prop_assert_eq!(last_good_lsn, before as u64);
                let _ = &records;
            }
            Err(WalError::Corrupt { .. }) => prop_assert!((at as u64) < ends[0]),
            Err(WalError::Version { .. }) => prop_assert!((8..10).contains(&at)),
            Err(e) => prop_assert!(false, "{}", e),
        }
    }
}

#[test]
fn a_checkpoint_written_beside_the_appends_survives_a_crash_at_each_step() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mut wal, _) = Wal::open(d, &opts()).unwrap();
    for i in 1..=10u64 {
        wal.append(&i.to_le_bytes()).unwrap();
    }
    wal.commit().unwrap();
    wal.append(b"pending, committed by begin").unwrap();
    let w = wal.begin_checkpoint().unwrap();
    assert_eq!(w.lsn(), 11);
    assert_eq!((wal.durable_lsn(), wal.pending_records()), (11, 0));
    // The log goes on into a new segment while the snapshot is written.
    assert!(d.join("00000000000000000012.wal").exists() && seg_path(d).exists());
    assert_eq!(wal.append(b"twelve").unwrap(), 12);
    assert_eq!(wal.commit().unwrap(), 12);
    let all: Vec<(Lsn, Vec<u8>)> = (1..=10u64)
        .map(|i| (i, i.to_le_bytes().to_vec()))
        .chain([
            (11, b"pending, committed by begin".to_vec()),
            (12, b"twelve".to_vec()),
        ])
        .collect();
    let as_vec = |rec: &sb_wal::Recovery| -> Vec<(Lsn, Vec<u8>)> {
        rec.iter().map(|(l, r)| (l, r.to_vec())).collect()
    };

    // A crash before the snapshot is written or installed: the old segment and the new one.
    let files: Vec<(PathBuf, Vec<u8>)> = fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .map(|p| (p.clone(), fs::read(&p).unwrap()))
        .collect();
    let crashed = tempfile::tempdir().unwrap();
    let copy = |files: &[(PathBuf, Vec<u8>)], to: &Path| {
        for (p, b) in files {
            fs::write(to.join(p.file_name().unwrap()), b).unwrap();
        }
    };
    copy(&files, crashed.path());
    fs::write(crashed.path().join("snapshot.tmp"), b"half a snapshot").unwrap();
    let (_, rec) = Wal::open(crashed.path(), &opts()).unwrap();
    assert!(rec.snapshot.is_none());
    assert_eq!(as_vec(&rec), all);
    assert!(!crashed.path().join("snapshot.tmp").exists());

    // Written (on another thread) and installed.
    let written = std::thread::spawn(move || w.write(b"state at 11"))
        .join()
        .unwrap()
        .unwrap();
    assert_eq!(written.lsn(), 11);
    assert_eq!(wal.finish_checkpoint(written).unwrap(), 11);
    assert!(!seg_path(d).exists());
    assert_eq!(
        wal.log_bytes(),
        fs::metadata(d.join("00000000000000000012.wal"))
            .unwrap()
            .len()
    );
    assert_eq!(wal.snapshot_lsn(), 11);
    assert_eq!(wal.records_since_checkpoint(), 1);
    assert_eq!(wal.stats().checkpoints, 1);
    drop(wal);
    let check = |rec: &sb_wal::Recovery| {
        let s = rec.snapshot.as_ref().unwrap();
        assert_eq!((s.lsn, s.data.as_slice()), (11, &b"state at 11"[..]));
        assert_eq!(as_vec(rec), all[11..].to_vec());
    };
    let (_, rec) = Wal::open(d, &opts()).unwrap();
    check(&rec);

    // A crash after the snapshot's rename, before the old segment was removed: obsolete.
    let (p, b) = files.iter().find(|(p, _)| p == &seg_path(d)).unwrap();
    fs::write(p, b).unwrap();
    let (mut wal, rec) = Wal::open(d, &opts()).unwrap();
    check(&rec);
    assert!(!seg_path(d).exists());

    // The next checkpoint: a new segment after record 12, the one holding it removed; one
    // more with nothing new keeps the active segment.
    let seg = |n: u64| d.join(format!("{n:020}.wal"));
    let w = wal.begin_checkpoint().unwrap();
    assert_eq!(w.lsn(), 12);
    assert!(seg(12).exists() && seg(13).exists());
    let written = w.write(b"state at 12").unwrap();
    assert_eq!(wal.finish_checkpoint(written).unwrap(), 12);
    assert!(!seg(12).exists() && seg(13).exists());
    let w = wal.begin_checkpoint().unwrap();
    let written = w.write(b"state at 12").unwrap();
    assert_eq!(wal.finish_checkpoint(written).unwrap(), 12);
    assert!(seg(13).exists());
    assert_eq!(wal.append(b"thirteen").unwrap(), 13);
    wal.commit().unwrap();
    drop(wal);
    let (_, rec) = Wal::open(d, &opts()).unwrap();
    assert_eq!(rec.snapshot.as_ref().unwrap().lsn, 12);
    assert_eq!(as_vec(&rec), vec![(13, b"thirteen".to_vec())]);
}

/// A snapshot streamed in pieces (`write_with`) is the same file as one written at once, and
/// is read back; with `SyncMode::Data` and more than `SNAPSHOT_SYNC_BYTES` of data it is
/// flushed as it goes. A fill that writes other than the announced length is refused and
/// leaves the log as it was.
#[test]
fn a_streamed_snapshot_is_the_same_file() {
    let data = payload(7, (sb_wal::SNAPSHOT_SYNC_BYTES + 4096 + 13) as usize);
    let mut files = Vec::new();
    for (streamed, sync) in [
        (false, SyncMode::Never),
        (true, SyncMode::Never),
        (true, SyncMode::Data),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let o = WalOptions { sync, ..opts() };
        let (mut wal, _) = Wal::open(dir.path(), &o).unwrap();
        for i in 1..=3u64 {
            wal.append(&i.to_le_bytes()).unwrap();
        }
        let w = wal.begin_checkpoint().unwrap();
        let written = if streamed {
            w.write_with(data.len() as u64, |sink| {
                use std::io::Write;
                for piece in data.chunks(1 << 19).chain([&data[..0]]) {
                    sink.write_all(piece)?;
                }
                Ok(())
            })
        } else {
            w.write(&data)
        }
        .unwrap();
        assert_eq!(wal.finish_checkpoint(written).unwrap(), 3);
        wal.append(b"four").unwrap();
        wal.commit().unwrap();
        drop(wal);
        let (_, rec) = Wal::open(dir.path(), &o).unwrap();
        let snap = rec.snapshot.as_ref().unwrap();
        assert_eq!((snap.lsn, snap.data.len()), (3, data.len()));
        assert!(snap.data == data, "streamed {streamed}: the data read back");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| !n.ends_with(".wal") && n != "LOCK")
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        files.push(fs::read(dir.path().join(&names[0])).unwrap());
    }
    assert!(
        files[0] == files[1] && files[1] == files[2],
        "the same bytes"
    );

    for wrote in [9usize, 11] {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), &opts()).unwrap();
        wal.append(b"one").unwrap();
        let w = wal.begin_checkpoint().unwrap();
        let e = w
            .write_with(10, |sink| {
                use std::io::Write;
                sink.write_all(&vec![1u8; wrote])
            })
            .unwrap_err();
        assert!(
            matches!(&e, WalError::Io { source, .. } if source.kind() == std::io::ErrorKind::InvalidInput),
            "{e}"
        );
        assert!(e.to_string().contains("not the 10 announced"), "{e}");
        let left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.contains("tmp"))
            .collect();
        assert!(left.is_empty(), "the temporary file removed: {left:?}");
        wal.append(b"two").unwrap();
        wal.commit().unwrap();
        drop(wal);
        let (_, rec) = Wal::open(dir.path(), &opts()).unwrap();
        assert!(rec.snapshot.is_none());
        assert_eq!(rec.iter().count(), 2);
    }
}
