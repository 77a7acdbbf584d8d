//! Network namespaces: run code with the calling thread inside a named namespace
//! (`/var/run/netns/NAME`, as `ip netns add NAME` makes), and create/delete such namespaces.
//!
//! A socket belongs to the namespace it was created in, whatever namespace the thread is in
//! later, so the pattern is: enter, open the port, leave; then use the port from anywhere.
//!
//! ```no_run
//! # fn main() -> Result<(), sb_io::IoError> {
//! use sb_io::{afpacket::{AfPacketConfig, AfPacketPort}, netns};
//! let port = netns::in_netns("node1", || AfPacketPort::open("inet", &AfPacketConfig::default()))??;
//! # Ok(()) }
//! ```
#![allow(unsafe_code)]

use crate::IoError;
use std::fs::File;
use std::marker::PhantomData;
use std::os::fd::AsRawFd;
use std::process::Command;

/// Directory where `ip netns` keeps its namespace handles.
pub const NETNS_DIR: &str = "/var/run/netns";

fn check_name(name: &str) -> Result<(), IoError> {
    if name.is_empty() || name.len() > 200 || name.contains('/') || name.contains('\0') {
        return Err(IoError::InvalidName(name.to_string()));
    }
    Ok(())
}

/// While alive, the calling thread is in another network namespace; dropping it moves the
/// thread back to the namespace it was in before. Not `Send`: it must be dropped on the thread
/// that made it.
#[must_use = "the thread returns to its namespace when the guard is dropped"]
pub struct NetnsGuard {
    orig: File,
    name: String,
    _not_send: PhantomData<*const ()>,
}

fn setns(f: &File, name: &str) -> Result<(), IoError> {
    // SAFETY: setns takes a valid open fd (borrowed from `f`, alive for the call) and a flag.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        return Err(IoError::Netns {
            name: name.to_string(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Whether this process runs with effective uid 0 (namespaces, AF_PACKET and AF_XDP need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Moves the calling thread into network namespace `name` until the guard is dropped.
pub fn enter(name: &str) -> Result<NetnsGuard, IoError> {
    check_name(name)?;
    let err = |source| IoError::Netns {
        name: name.to_string(),
        source,
    };
    let orig = File::open("/proc/thread-self/ns/net").map_err(err)?;
    let target = File::open(format!("{NETNS_DIR}/{name}")).map_err(err)?;
    setns(&target, name)?;
    Ok(NetnsGuard {
        orig,
        name: name.to_string(),
        _not_send: PhantomData,
    })
}

impl NetnsGuard {
    /// The namespace the thread is in while the guard lives.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        // Going back can only fail if the original namespace handle became invalid, which an
        // open fd prevents; nothing better to do than stay.
        let _ = setns(&self.orig, "(original)");
    }
}

/// Runs `f` with the calling thread inside network namespace `name`, then moves it back.
pub fn in_netns<T>(name: &str, f: impl FnOnce() -> T) -> Result<T, IoError> {
    let _g = enter(name)?;
    Ok(f())
}

/// Runs `ip ARGS...`; an error carries its stderr.
pub fn ip(args: &[&str]) -> Result<(), IoError> {
    run("ip", args)
}

/// Runs `program ARGS...` and waits; an error carries its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<(), IoError> {
    let cmd = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| IoError::Command {
            cmd: cmd.clone(),
            detail: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(IoError::Command {
            cmd,
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// A named network namespace that this process created; deleted (with every interface inside
/// it) when dropped. Use unique names (e.g. include the process id) in tests.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates namespace `name` (`ip netns add`), brings its loopback up and turns IPv6 off in
    /// it (no router solicitations or DAD chatter on test links). Fails if it already exists.
    pub fn create(name: &str) -> Result<Netns, IoError> {
        check_name(name)?;
        ip(&["netns", "add", name])?;
        let ns = Netns {
            name: name.to_string(),
        };
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        in_netns(name, || {
            for k in ["all", "default"] {
                let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{k}/disable_ipv6"), "1");
            }
        })?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `f` inside this namespace.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> Result<T, IoError> {
        in_netns(&self.name, f)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Creates a veth pair: `a_name` in namespace `a_ns`, `b_name` in `b_ns`, both up, IPv6 off.
/// The pair disappears with either namespace.
pub fn veth_pair(a_ns: &str, a_name: &str, b_ns: &str, b_name: &str) -> Result<(), IoError> {
    ip(&[
        "link", "add", "name", a_name, "netns", a_ns, "type", "veth", "peer", "name", b_name,
        "netns", b_ns,
    ])?;
    for (ns, dev) in [(a_ns, a_name), (b_ns, b_name)] {
        in_netns(ns, || {
            let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"), "1");
        })?;
        ip(&["-n", ns, "link", "set", "dev", dev, "up"])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode(path: &str) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().ino()
    }

    #[test]
    fn enter_and_leave() {
        if !super::is_root() {
            eprintln!("skipping: needs root");
            return;
        }
        let name = format!("sbio-ns-{}", std::process::id());
        let ns = Netns::create(&name).unwrap();
        let before = inode("/proc/thread-self/ns/net");
        let inside = ns.run(|| inode("/proc/thread-self/ns/net")).unwrap();
        assert_ne!(before, inside);
        assert_eq!(inode(&format!("{NETNS_DIR}/{name}")), inside);
        assert_eq!(inode("/proc/thread-self/ns/net"), before);
        assert!(matches!(
            enter("no-such-ns-sbio"),
            Err(IoError::Netns { .. })
        ));
        assert!(matches!(enter("../x"), Err(IoError::InvalidName(_))));
        drop(ns);
        assert!(!std::path::Path::new(&format!("{NETNS_DIR}/{name}")).exists());
    }
}
