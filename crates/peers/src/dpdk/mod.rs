//! DPDK peers. DPDK runs here without hugepages (`--no-huge --no-pci --no-shconf`),
//! so its tables sit on 4 KB pages; its EAL is started once per process by [`eal_init`].
#![allow(unsafe_code)]

pub mod hash;

use std::sync::Mutex;

pub mod efd;

extern "C" {
    fn sb_dpdk_eal_init(mem_mb: u32) -> i32;
}

/// DPDK's EAL could not start.
#[derive(Debug, thiserror::Error)]
#[error("DPDK EAL initialisation failed (rte_errno {0})")]
pub struct EalError(pub i32);

/// Starts DPDK's EAL once per process with `mem_mb` MB of (4 KB page) memory; later calls return
/// the first call's outcome. The EAL is started with `--force-max-simd-bitwidth=128`: Debian's
/// DPDK 22.11 EFD answers wrong from its AVX2 lookup path on these machines (every lookup answers
/// 0; `crates/peers/repro/efd_avx2.c` shows it with the DPDK API alone).
pub fn eal_init(mem_mb: u32) -> Result<(), EalError> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the shim keeps its own once-state and is called under the lock.
    let r = unsafe { sb_dpdk_eal_init(mem_mb) };
    if r == 0 {
        Ok(())
    } else {
        Err(EalError(r))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn eal_starts_without_hugepages() {
        super::eal_init(256).expect("EAL init");
        super::eal_init(256).expect("second init is a no-op");
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
