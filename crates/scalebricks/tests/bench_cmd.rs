//! `scalebricks bench ...` runs the `scalebricks-bench` binary next to the executable; without
//! it, it says how to build it.

use std::process::Command;

#[test]
fn bench_without_the_bench_binary_says_how_to_build_it() {
    // A copy of the binary alone in a directory: no scalebricks-bench next to it.
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("scalebricks");
    std::fs::copy(env!("CARGO_BIN_EXE_scalebricks"), &exe).unwrap();
    let o = Command::new(&exe)
        .args(["bench", "gpt", "--keys", "10", "--value-bits", "1"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("the binary runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(o.stdout.is_empty());
    assert!(
        err.contains("scalebricks-bench") && err.contains("cargo build --release -p sb-bench"),
        "{err}"
    );
}
