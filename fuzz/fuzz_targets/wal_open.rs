//! Wal::open on arbitrary bytes written as a log (as a segment, after a valid segment header,
//! as a frame with valid checksums, as a snapshot): never panics; whatever opens reopens to the
//! same records and takes an append.
#![no_main]
use std::sync::OnceLock;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // One directory for the whole run (emptied by open_bytes); on tmpfs when there is one.
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm");
        if shm.is_dir() {
            tempfile::tempdir_in(shm).expect("temp dir")
        } else {
            tempfile::tempdir().expect("temp dir")
        }
    });
    sb_wal::fuzzing::open_bytes(dir.path(), data);
});
