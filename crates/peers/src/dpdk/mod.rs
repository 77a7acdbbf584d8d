//! DPDK peers and their EAL, started once per process by [`eal_init_pages`] (or [`eal_init`]).
//!
//! DPDK is deployed on hugepages, so the benchmarks start the EAL with [`EalPages::Auto`]: when
//! 2 MB hugepages are reserved (`vm.nr_hugepages`), enough of them are free and a hugetlbfs of
//! 2 MB pages is mounted, DPDK takes its memory from there (`--huge-dir`; `SB_HUGE_DIR` picks the
//! mount when there are several); otherwise it runs with `--no-huge` on 4 KB pages, and the
//! returned [`EalStart`] says why. `scripts/hugepages.sh` reserves and mounts them for a command
//! and undoes both afterwards. [`memory_pages`] measures, from `/proc/self/smaps`, what pages
//! back the memory segments DPDK reports (the heap every DPDK table sits in).
#![allow(unsafe_code)]

pub mod hash;

use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub mod efd;

extern "C" {
    fn sb_dpdk_eal_init(mem_mb: u32, huge_dir: *const c_char) -> i32;
    fn sb_dpdk_memsegs(addr: *mut usize, len: *mut usize, page_sz: *mut u64, max: usize) -> usize;
}

/// DPDK's EAL could not start.
#[derive(Debug, thiserror::Error)]
#[error("DPDK EAL initialisation failed (rte_errno {0})")]
pub struct EalError(pub i32);

/// Which pages the EAL takes its memory from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EalPages {
    /// 2 MB hugepages when they are reserved, free and mounted; else `--no-huge`.
    Auto,
    /// `--no-huge`: anonymous memory on 4 KB pages.
    NoHuge,
}

/// How the EAL was started: on hugepages or not, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EalStart {
    /// The hugetlbfs mount DPDK's memory comes from; `None` for `--no-huge`.
    pub huge_dir: Option<PathBuf>,
    /// `-m`: MB of memory the EAL took at start.
    pub mem_mb: u32,
    /// Why these pages (e.g. "no 2 MB hugepages reserved (vm.nr_hugepages = 0)").
    pub why: String,
}

impl EalStart {
    /// Whether DPDK runs on hugepages.
    pub fn hugepages(&self) -> bool {
        self.huge_dir.is_some()
    }
}

/// The system's 2 MB hugepages: reserved, free, and the hugetlbfs mounts that hand them out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hugepages2m {
    /// `/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages`.
    pub total: u64,
    /// `.../free_hugepages`.
    pub free: u64,
    /// hugetlbfs mounts of 2 MB pages, from `/proc/mounts`.
    pub mounts: Vec<PathBuf>,
}

/// Reads the 2 MB hugepage counters and mounts of this machine (zeros where unreadable).
pub fn hugepages_2m() -> Hugepages2m {
    let dir = Path::new("/sys/kernel/mm/hugepages/hugepages-2048kB");
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    let default_kb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("Hugepagesize:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0);
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    Hugepages2m {
        total: read("nr_hugepages"),
        free: read("free_hugepages"),
        mounts: hugetlbfs_2m_mounts(&mounts, default_kb),
    }
}

/// The mount points in a `/proc/mounts` text of hugetlbfs file systems with 2 MB pages (the
/// `pagesize=` option, or the default hugepage size `default_kb` when there is none).
pub fn hugetlbfs_2m_mounts(mounts: &str, default_kb: u64) -> Vec<PathBuf> {
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 4 || f[2] != "hugetlbfs" {
                return None;
            }
            let size = f[3].split(',').find_map(|o| o.strip_prefix("pagesize="));
            let two_mb = match size {
                Some(s) => matches!(s, "2M" | "2048K" | "2048k" | "2097152"),
                None => default_kb == 2048,
            };
            two_mb.then(|| PathBuf::from(f[1]))
        })
        .collect()
}

/// Where the EAL would take `mem_mb` MB from under `pages`, given the machine's hugepages and
/// the preferred mount `want` (`SB_HUGE_DIR`): `(mount or None for --no-huge, why)`.
pub fn choose_pages(
    pages: EalPages,
    mem_mb: u32,
    huge: &Hugepages2m,
    want: Option<&Path>,
) -> (Option<PathBuf>, String) {
    if pages == EalPages::NoHuge {
        return (None, "--no-huge asked for (4 KB pages)".into());
    }
    if huge.total == 0 {
        return (
            None,
            "no 2 MB hugepages reserved (vm.nr_hugepages = 0): --no-huge".into(),
        );
    }
    let dir = match want {
        Some(w) if huge.mounts.iter().any(|m| m == w) => w.to_path_buf(),
        Some(w) => {
            return (
                None,
                format!(
                    "SB_HUGE_DIR={} is not a hugetlbfs mount of 2 MB pages: --no-huge",
                    w.display()
                ),
            )
        }
        None => match huge.mounts.first() {
            Some(m) => m.clone(),
            None => return (None, "no hugetlbfs mount of 2 MB pages: --no-huge".into()),
        },
    };
    if huge.free * 2 < mem_mb as u64 {
        return (
            None,
            format!(
                "{} free 2 MB hugepages ({} MB), {mem_mb} MB needed: --no-huge",
                huge.free,
                huge.free * 2
            ),
        );
    }
    let why = format!(
        "{} of {} 2 MB hugepages free, hugetlbfs at {}",
        huge.free,
        huge.total,
        dir.display()
    );
    (Some(dir), why)
}

static STATE: Mutex<Option<Result<EalStart, i32>>> = Mutex::new(None);

/// Starts DPDK's EAL once per process with `mem_mb` MB of memory from the pages `pages` picks;
/// later calls return the first call's outcome (whatever they ask). The EAL is started with
/// `--force-max-simd-bitwidth=128`: Debian's DPDK 22.11 EFD answers wrong from its AVX2 lookup
/// path on these machines (every lookup answers 0; `crates/peers/repro/efd_avx2.c` shows it
/// with the DPDK API alone).
pub fn eal_init_pages(mem_mb: u32, pages: EalPages) -> Result<EalStart, EalError> {
    let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = &*st {
        return r.clone().map_err(EalError);
    }
    let want = std::env::var_os("SB_HUGE_DIR").map(PathBuf::from);
    let (dir, why) = choose_pages(pages, mem_mb, &hugepages_2m(), want.as_deref());
    let c_dir = dir
        .as_ref()
        .map(|d| CString::new(d.as_os_str().as_encoded_bytes()).map_err(|_| EalError(-22)))
        .transpose()?;
    // SAFETY: the shim keeps its own once-state and is called under the lock; the directory
    // string outlives the call (DPDK copies it).
    let r = unsafe {
        sb_dpdk_eal_init(
            mem_mb,
            c_dir.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        )
    };
    let out = if r == 0 {
        Ok(EalStart {
            huge_dir: dir,
            mem_mb,
            why,
        })
    } else {
        Err(r)
    };
    *st = Some(out.clone());
    out.map_err(EalError)
}

/// Starts the EAL as [`eal_init_pages`] with [`EalPages::NoHuge`] (4 KB pages) if it is not
/// started yet; otherwise returns the first start's outcome.
pub fn eal_init(mem_mb: u32) -> Result<(), EalError> {
    eal_init_pages(mem_mb, EalPages::NoHuge).map(|_| ())
}

/// How the EAL was started, if it was (successfully).
pub fn eal_started() -> Option<EalStart> {
    STATE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .and_then(Result::ok)
}

/// A virtually contiguous run of DPDK memory segments, as DPDK reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemSeg {
    /// Start address.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
    /// The page size DPDK says backs it.
    pub page_size: u64,
}

/// DPDK's memory segments (empty before the EAL started).
pub fn memsegs() -> Vec<MemSeg> {
    let mut n = 64;
    loop {
        let (mut a, mut l, mut p) = (vec![0usize; n], vec![0usize; n], vec![0u64; n]);
        // SAFETY: three buffers of n elements; the shim writes at most n of each.
        let got = unsafe { sb_dpdk_memsegs(a.as_mut_ptr(), l.as_mut_ptr(), p.as_mut_ptr(), n) };
        if got <= n {
            return (0..got)
                .map(|i| MemSeg {
                    addr: a[i],
                    len: l[i],
                    page_size: p[i],
                })
                .collect();
        }
        n = got;
    }
}

/// What backs DPDK's memory, measured: `/proc/self/smaps` over the segments [`memsegs`]
/// reports (resident bytes; every DPDK table of this process sits in them), and the page sizes
/// DPDK itself reports for them.
pub fn memory_pages() -> std::io::Result<(sb_common::PageInfo, Vec<u64>)> {
    let segs = memsegs();
    let ranges: Vec<(usize, usize)> = segs.iter().map(|s| (s.addr, s.len)).collect();
    let mut sizes: Vec<u64> = segs.iter().map(|s| s.page_size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    Ok((
        sb_common::pages::measure_ranges(&ranges)?.page_info(),
        sizes,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_2m_hugetlbfs_mounts() {
        let mounts = "\
proc /proc proc rw,nosuid 0 0
hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0
none /run/sb-1g hugetlbfs rw,relatime,pagesize=1024M 0 0
nodev /run/scalebricks-huge hugetlbfs rw,relatime 0 0
";
        assert_eq!(
            hugetlbfs_2m_mounts(mounts, 2048),
            vec![
                PathBuf::from("/dev/hugepages"),
                PathBuf::from("/run/scalebricks-huge")
            ]
        );
        assert_eq!(
            hugetlbfs_2m_mounts(mounts, 1 << 20),
            vec![PathBuf::from("/dev/hugepages")]
        );
        assert!(hugetlbfs_2m_mounts("garbage\n\n x y", 2048).is_empty());
    }

    #[test]
    fn chooses_hugepages_only_when_reserved_mounted_and_free() {
        let mnt = PathBuf::from("/run/scalebricks-huge");
        let ok = Hugepages2m {
            total: 512,
            free: 512,
            mounts: vec![mnt.clone()],
        };
        assert_eq!(
            choose_pages(EalPages::Auto, 1024, &ok, None).0,
            Some(mnt.clone())
        );
        assert_eq!(
            choose_pages(EalPages::Auto, 1024, &ok, Some(&mnt)).0,
            Some(mnt.clone())
        );
        let (d, why) = choose_pages(EalPages::Auto, 1024, &ok, Some(Path::new("/tmp")));
        assert!(d.is_none() && why.contains("SB_HUGE_DIR"), "{why}");
        assert!(choose_pages(EalPages::NoHuge, 1024, &ok, None).0.is_none());
        let (d, why) = choose_pages(EalPages::Auto, 1026, &ok, None);
        assert!(d.is_none() && why.contains("1026 MB needed"), "{why}");
        let unmounted = Hugepages2m {
            mounts: vec![],
            ..ok.clone()
        };
        let (d, why) = choose_pages(EalPages::Auto, 64, &unmounted, None);
        assert!(d.is_none() && why.contains("no hugetlbfs mount"), "{why}");
        let (d, why) = choose_pages(EalPages::Auto, 64, &Hugepages2m::default(), None);
        assert!(d.is_none() && why.contains("nr_hugepages = 0"), "{why}");
    }

    #[test]
    fn eal_starts_without_hugepages() {
        super::eal_init(256).expect("EAL init");
        super::eal_init(256).expect("second init is a no-op");
        let st = super::eal_started().expect("started");
        assert!(!st.hugepages(), "{st:?}");
        // --no-huge memory: DPDK reports 4 KB pages and smaps finds no hugetlbfs page in it.
        let (info, sizes) = super::memory_pages().unwrap();
        assert_eq!(sizes, vec![4096]);
        assert!(
            info.bytes > 0 && info.hugetlb_bytes == 0,
            "{}",
            info.detail()
        );
        // The EAL pins its main thread to lcore 0; the shim must give the CPU set back.
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        assert_eq!(cpus_allowed(), n, "EAL init left the thread pinned");
    }

    fn cpus_allowed() -> usize {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with("Cpus_allowed_list:"))
            .unwrap();
        line.split(':')
            .nth(1)
            .unwrap()
            .trim()
            .split(',')
            .map(|r| match r.split_once('-') {
                Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
                None => 1,
            })
            .sum()
    }
}
