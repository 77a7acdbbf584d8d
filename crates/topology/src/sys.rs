//! The only place this crate touches the system: running iproute2 / sysctl, and signalling the
//! processes `up` started.
#![allow(unsafe_code)]

use std::process::Command;
use std::time::{Duration, Instant};

use crate::TopoError;

/// Runs `prog args...`, turning a failure into an error that quotes the command and its stderr.
pub fn run(prog: &str, args: &[&str]) -> Result<String, TopoError> {
    let cmdline = || format!("{prog} {}", args.join(" "));
    let out = Command::new(prog)
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .map_err(|e| TopoError::Spawn {
            cmd: cmdline(),
            source: e,
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(TopoError::Command {
            cmd: cmdline(),
            status: out.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// `ip args...`
pub fn ip(args: &[&str]) -> Result<String, TopoError> {
    run("ip", args)
}

/// Names of the network namespaces that exist now (`ip netns list`).
pub fn netns_list() -> Result<Vec<String>, TopoError> {
    let out = ip(&["netns", "list"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// Whether a namespace named `name` exists.
pub fn netns_exists(name: &str) -> bool {
    std::path::Path::new("/run/netns").join(name).exists()
}

/// Start time (clock ticks since boot) of process `pid`, or `None` if there is no such live
/// process (zombies count as gone).
pub fn proc_start(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); start time is field 22.
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    fields.get(22 - 3)?.parse().ok()
}

fn signal(pid: i32, sig: i32) -> bool {
    // SAFETY: kill(2) takes plain integers and has no memory-safety preconditions.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Stops process `pid` if it is still the process started at `start`: SIGTERM, then SIGKILL after
/// `grace`. Returns whether it was running.
pub fn stop_process(pid: i32, start: u64, grace: Duration) -> bool {
    if pid <= 1 || proc_start(pid) != Some(start) {
        return false;
    }
    signal(pid, libc::SIGTERM);
    let t0 = Instant::now();
    while t0.elapsed() < grace {
        if proc_start(pid) != Some(start) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if proc_start(pid) == Some(start) {
        signal(pid, libc::SIGKILL);
        let t1 = Instant::now();
        while proc_start(pid) == Some(start) && t1.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_readable() {
        let me = std::process::id() as i32;
        assert!(proc_start(me).is_some());
        assert!(proc_start(i32::MAX).is_none());
    }

    #[test]
    fn failing_command_quotes_stderr() {
        let e = run("ip", &["link", "show", "dev", "no-such-dev-sb"]).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("ip link show dev no-such-dev-sb"), "{s}");
    }

    #[test]
    fn stop_process_terminates_and_skips_reused_pids() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let start = proc_start(pid).unwrap();
        assert!(!stop_process(pid, start + 1, Duration::from_millis(100)));
        assert!(proc_start(pid).is_some());
        // Reap in the background so the child does not stay a zombie.
        let h = std::thread::spawn(move || child.wait());
        assert!(stop_process(pid, start, Duration::from_secs(2)));
        h.join().unwrap().unwrap();
        assert!(proc_start(pid).is_none());
    }
}
