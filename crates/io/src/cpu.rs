//! CPU pinning and the CPU-time counters benchmarks report (thread time from
//! `/proc/self/task/TID/stat`, per-CPU softirq time from `/proc/stat`).
#![allow(unsafe_code)]

use crate::IoError;

/// Pins the calling thread to CPU `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<(), IoError> {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it (cpu is bounds-checked below).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(IoError::Unsupported(format!("cpu {cpu} out of range")));
    }
    // SAFETY: cpu < CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: set is a valid cpu_set_t of the given size; pid 0 is the calling thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        return Err(IoError::last("sched_setaffinity"));
    }
    Ok(())
}

/// Number of CPUs this process may run on.
pub fn online_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The calling thread's kernel id.
pub fn current_tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Clock ticks per second of the /proc time counters.
pub fn ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// utime + stime (clock ticks) of the task whose stat file is `path`.
fn stat_ticks(path: &str) -> Option<u64> {
    let s = std::fs::read_to_string(path).ok()?;
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ut: u64 = f.get(11)?.parse().ok()?;
    let st: u64 = f.get(12)?.parse().ok()?;
    Some(ut + st)
}

/// utime + stime (clock ticks) of thread `tid` of this process.
pub fn thread_ticks(tid: i32) -> Option<u64> {
    stat_ticks(&format!("/proc/self/task/{tid}/stat"))
}

/// utime + stime (clock ticks) of process `pid` (e.g. a `ksoftirqd` kernel thread).
pub fn pid_ticks(pid: i32) -> Option<u64> {
    stat_ticks(&format!("/proc/{pid}/stat"))
}

/// The pid of `ksoftirqd/CPU`.
pub fn ksoftirqd_pid(cpu: usize) -> Option<i32> {
    let want = format!("ksoftirqd/{cpu}");
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) {
            if comm.trim() == want {
                return Some(pid);
            }
        }
    }
    None
}

/// Per-CPU times from `/proc/stat` (clock ticks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// user + nice
    pub user: u64,
    /// system
    pub system: u64,
    /// idle + iowait
    pub idle: u64,
    /// hardware interrupts
    pub irq: u64,
    /// softirqs
    pub softirq: u64,
}

impl CpuTimes {
    /// Busy ticks (everything but idle).
    pub fn busy(&self) -> u64 {
        self.user + self.system + self.irq + self.softirq
    }
}

/// The `/proc/stat` line of CPU `cpu`.
pub fn cpu_times(cpu: usize) -> Option<CpuTimes> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let tag = format!("cpu{cpu} ");
    let line = s.lines().find(|l| l.starts_with(&tag))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    Some(CpuTimes {
        user: v.first()? + v.get(1)?,
        system: *v.get(2)?,
        idle: v.get(3)? + v.get(4)?,
        irq: *v.get(5)?,
        softirq: *v.get(6)?,
    })
}

/// CPU seconds (user + system) used by this process's children that have been waited for
/// (`getrusage(RUSAGE_CHILDREN)`); take the difference around a child's run.
pub fn children_cpu_seconds() -> f64 {
    // SAFETY: rusage is plain data; getrusage writes it whole.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is a valid rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Nanoseconds thread `tid` of this process has run on a CPU (`/proc/self/task/TID/schedstat`,
/// the scheduler's own clock: finer than the tick-sampled `stat` times; on kernels without
/// `CONFIG_IRQ_TIME_ACCOUNTING` it includes softirqs that ran on the thread's stack).
pub fn thread_runtime_ns(tid: i32) -> Option<u64> {
    schedstat(&format!("/proc/self/task/{tid}/schedstat"))
}

/// Like [`thread_runtime_ns`] for process `pid` (e.g. `ksoftirqd/N`).
pub fn pid_runtime_ns(pid: i32) -> Option<u64> {
    schedstat(&format!("/proc/{pid}/schedstat"))
}

fn schedstat(path: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_read_and_grow() {
        let tid = current_tid();
        let t0 = thread_ticks(tid).unwrap();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed().as_millis() < 100 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(thread_ticks(tid).unwrap() >= t0);
        assert!(cpu_times(0).is_some());
        assert!(ticks_per_sec() >= 100);
        assert!(ksoftirqd_pid(0).is_some());
        pin_current_thread(0).unwrap();
    }
}
