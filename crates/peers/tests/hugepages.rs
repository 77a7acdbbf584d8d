//! The DPDK peers run on 2 MB hugepages when some are reserved and mounted, and say so: the EAL
//! started with `EalPages::Auto` reports a hugetlbfs mount, and `/proc/self/smaps` over DPDK's
//! memory segments (where an rte_hash and an EFD table were just made) shows 2 MB hugetlbfs pages.
//!
//! Without free hugepages the test reruns itself under `scripts/hugepages.sh` (which reserves
//! and mounts them and undoes both) when it is root and `CI=true`, and then checks that the undo
//! happened; outside CI it skips with a message. Under `CI=true` without root it fails: a missing
//! precondition is not a pass there.
#![cfg(feature = "dpdk")]

use sb_peers::dpdk::{self, EalPages};
use std::path::Path;
use std::process::Command;

const CHILD: &str = "SB_HUGEPAGES_TEST_CHILD";
/// MB the test reserves (the EAL asks for 64 less).
const MB: u32 = 192;

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|u| u.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

#[test]
fn dpdk_peers_run_on_2m_hugepages_when_reserved() {
    let huge = dpdk::hugepages_2m();
    if huge.free * 2 >= MB as u64 && !huge.mounts.is_empty() {
        return check_in_this_process();
    }
    assert!(
        std::env::var_os(CHILD).is_none(),
        "rerun under scripts/hugepages.sh, yet no free 2 MB hugepages: {huge:?}"
    );
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if !is_root() {
        assert!(
            !ci,
            "CI=true: this test needs root to reserve hugepages (or {MB} MB of them reserved and a hugetlbfs mounted)"
        );
        eprintln!("skipped: no free 2 MB hugepages mounted and not root to reserve them");
        return;
    }
    if !ci {
        eprintln!(
            "skipped: no free 2 MB hugepages mounted (with CI=true as root the test reserves \
             them through scripts/hugepages.sh)"
        );
        return;
    }
    let before = std::fs::read_to_string("/proc/sys/vm/nr_hugepages").unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/hugepages.sh");
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(script)
        .arg(MB.to_string())
        .arg(exe)
        .args([
            "--exact",
            "dpdk_peers_run_on_2m_hugepages_when_reserved",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .expect("running scripts/hugepages.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "child under hugepages.sh failed:\n{text}"
    );
    assert!(text.contains("1 passed"), "{text}");
    assert!(text.contains("EAL on hugepages"), "{text}");
    eprintln!("{text}");
    // The script undid what it did.
    let after = std::fs::read_to_string("/proc/sys/vm/nr_hugepages").unwrap();
    assert_eq!(before, after, "vm.nr_hugepages not restored");
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(
        !mounts.contains("/run/scalebricks-huge."),
        "hugetlbfs left mounted:\n{mounts}"
    );
}

fn check_in_this_process() {
    let start = dpdk::eal_init_pages(MB - 64, EalPages::Auto).expect("EAL on hugepages");
    assert!(start.hugepages(), "EAL fell back: {}", start.why);
    let mut h = dpdk::hash::RteHash::new(1 << 16, 13, 16).unwrap();
    for i in 0u32..1000 {
        let mut k = [0u8; 13];
        k[..4].copy_from_slice(&i.to_le_bytes());
        h.insert(&k, &[1; 16]).unwrap();
    }
    let efd = dpdk::efd::Efd::new(1 << 14, 13).unwrap();
    let (info, dpdk_sizes) = dpdk::memory_pages().unwrap();
    assert_eq!(dpdk_sizes, vec![2 << 20], "DPDK's own report");
    assert_eq!(info.label(), "2M", "{}", info.detail());
    assert_eq!(info.hugetlb_bytes, info.bytes, "{}", info.detail());
    assert!(info.bytes >= 2 << 20);
    eprintln!("EAL on hugepages ({}): {}", start.why, info.detail());
    drop((h, efd));
}
