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

/// Stops the processes `procs` (pid, start time) that are still the processes started then:
/// SIGTERM to every one at once, SIGKILL after `grace` to those still running. Returns, for
/// each, whether it was running. All at once: a cluster's nodes stopped one after another
/// would each see its peers die first, and fail over (taking their ranges, installing their
/// flows) while it waits for its own signal.
pub fn stop_processes(procs: &[(i32, u64)], grace: Duration) -> Vec<bool> {
    let alive = |&(pid, start): &(i32, u64)| pid > 1 && proc_start(pid) == Some(start);
    let running: Vec<bool> = procs.iter().map(alive).collect();
    let any_left = || procs.iter().any(alive);
    for (&(pid, _), _) in procs.iter().zip(&running).filter(|(_, &r)| r) {
        signal(pid, libc::SIGTERM);
    }
    let t0 = Instant::now();
    while any_left() && t0.elapsed() < grace {
        std::thread::sleep(Duration::from_millis(10));
    }
    if any_left() {
        for p in procs.iter().filter(|p| alive(p)) {
            signal(p.0, libc::SIGKILL);
        }
        let t1 = Instant::now();
        while any_left() && t1.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    running
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Processes that ignore SIGTERM are killed after the grace, together: three of them take
    /// about one grace, not three.
    #[test]
    fn processes_are_stopped_at_once() {
        let mut children: Vec<std::process::Child> = (0..3)
            .map(|_| {
                std::process::Command::new("sh")
                    .args(["-c", "trap '' TERM; while :; do sleep 1; done"])
                    .spawn()
                    .expect("sh")
            })
            .collect();
        // Each shell has set its trap once it sleeps (its child is there).
        std::thread::sleep(Duration::from_millis(300));
        let procs: Vec<(i32, u64)> = children
            .iter()
            .map(|c| {
                let pid = c.id() as i32;
                (pid, proc_start(pid).expect("running"))
            })
            .collect();
        // Reap them as they die, so that they do not stay as zombies.
        let reaper = std::thread::spawn(move || {
            for c in &mut children {
                let _ = c.wait();
            }
        });
        let t0 = Instant::now();
        let running = stop_processes(&procs, Duration::from_millis(1500));
        let took = t0.elapsed();
        reaper.join().expect("reaper");
        assert_eq!(running, [true; 3]);
        assert!(procs
            .iter()
            .all(|&(pid, start)| proc_start(pid) != Some(start)));
        assert!(
            took >= Duration::from_millis(1500),
            "{took:?}: SIGTERM was not ignored"
        );
        assert!(
            took < Duration::from_millis(3000),
            "{took:?}: one after another"
        );
        // Gone processes are not running.
        assert_eq!(
            stop_processes(&procs, Duration::from_millis(100)),
            [false; 3]
        );
    }

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
    fn stopping_terminates_and_skips_reused_pids() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let start = proc_start(pid).unwrap();
        assert_eq!(
            stop_processes(&[(pid, start + 1)], Duration::from_millis(100)),
            [false]
        );
        assert!(proc_start(pid).is_some());
        // Reap in the background so the child does not stay a zombie.
        let h = std::thread::spawn(move || child.wait());
        assert_eq!(
            stop_processes(&[(pid, start)], Duration::from_secs(2)),
            [true]
        );
        h.join().unwrap().unwrap();
        assert!(proc_start(pid).is_none());
    }
}
