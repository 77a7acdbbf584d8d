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

/// Offload features of an interface that change what a packet socket sees: with them on, a
/// kernel socket's frames cross a veth with a partial checksum (`tx_checksum`) or as one
/// super-frame of up to 64 KB (`tso`, `gso`, and `gro` on the receiving end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offloads {
    /// Transmit checksum offload (`ethtool -K DEV tx`).
    pub tx_checksum: bool,
    /// TCP segmentation offload (`tso`).
    pub tso: bool,
    /// Generic segmentation offload (`gso`).
    pub gso: bool,
    /// Generic receive offload (`gro`).
    pub gro: bool,
}

impl Offloads {
    /// Every offload off (`ethtool -K DEV tx off tso off gso off gro off`): each frame on the
    /// link is a complete, checksummed, MTU-sized frame.
    pub const OFF: Offloads = Offloads {
        tx_checksum: false,
        tso: false,
        gso: false,
        gro: false,
    };
}

/// `SIOCETHTOOL` commands (linux/ethtool.h), the legacy per-feature get/set pairs.
const ETHTOOL_GTXCSUM: u32 = 0x16;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_SGRO: u32 = 0x2c;

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// One `SIOCETHTOOL` ioctl with an `ethtool_value` on interface `ifname`; returns `data`.
fn ethtool_value(ifname: &str, cmd: u32, data: u32, op: &'static str) -> Result<u32, IoError> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ || ifname.contains('\0') {
        return Err(IoError::InvalidName(ifname.to_string()));
    }
    // SAFETY: plain socket(2) call; the fd is closed by the OwnedFd below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(IoError::last("socket(AF_INET) for SIOCETHTOOL"));
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut val = EthtoolValue { cmd, data };
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut val as *mut EthtoolValue).cast();
    // SAFETY: ifr holds a NUL-terminated name (zeroed tail, length checked) and points to
    // `val`, a live ethtool_value, for the duration of the call; the kernel reads and writes
    // only that struct.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL as _, &mut ifr) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENODEV) {
            return Err(IoError::NoSuchInterface(ifname.to_string()));
        }
        return Err(IoError::Sys { op, source: e });
    }
    Ok(val.data)
}

/// Sets the offloads of interface `ifname` in the calling thread's network namespace (with the
/// legacy `SIOCETHTOOL` commands, so no `ethtool` binary is needed; run it inside a namespace
/// with [`in_netns`]). Turning transmit checksumming off also turns TSO off (the kernel's
/// feature dependencies), so set them together.
pub fn set_offloads(ifname: &str, o: &Offloads) -> Result<(), IoError> {
    // Checksumming first: TSO cannot be on without it.
    ethtool_value(
        ifname,
        ETHTOOL_STXCSUM,
        o.tx_checksum as u32,
        "SIOCETHTOOL STXCSUM",
    )?;
    ethtool_value(ifname, ETHTOOL_STSO, o.tso as u32, "SIOCETHTOOL STSO")?;
    ethtool_value(ifname, ETHTOOL_SGSO, o.gso as u32, "SIOCETHTOOL SGSO")?;
    ethtool_value(ifname, ETHTOOL_SGRO, o.gro as u32, "SIOCETHTOOL SGRO")?;
    Ok(())
}

/// The offloads of interface `ifname` in the calling thread's network namespace, as the kernel
/// reports them now.
pub fn offloads(ifname: &str) -> Result<Offloads, IoError> {
    Ok(Offloads {
        tx_checksum: ethtool_value(ifname, ETHTOOL_GTXCSUM, 0, "SIOCETHTOOL GTXCSUM")? != 0,
        tso: ethtool_value(ifname, ETHTOOL_GTSO, 0, "SIOCETHTOOL GTSO")? != 0,
        gso: ethtool_value(ifname, ETHTOOL_GGSO, 0, "SIOCETHTOOL GGSO")? != 0,
        gro: ethtool_value(ifname, ETHTOOL_GGRO, 0, "SIOCETHTOOL GGRO")? != 0,
    })
}

/// The MTU of interface `ifname` in the calling thread's network namespace (from sysfs).
pub fn mtu(ifname: &str) -> Result<u32, IoError> {
    if ifname.is_empty() || ifname.contains('/') || ifname.len() >= libc::IFNAMSIZ {
        return Err(IoError::InvalidName(ifname.to_string()));
    }
    // Not /sys/class/net: sysfs shows the namespace it was mounted in, not the thread's.
    // SAFETY: plain socket(2) call; the fd is closed by the OwnedFd below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(IoError::last("socket(AF_INET) for SIOCGIFMTU"));
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: ifr holds a NUL-terminated name; SIOCGIFMTU writes the MTU into it.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU as _, &mut ifr) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENODEV) {
            return Err(IoError::NoSuchInterface(ifname.to_string()));
        }
        return Err(IoError::Sys {
            op: "SIOCGIFMTU",
            source: e,
        });
    }
    // SAFETY: SIOCGIFMTU filled the ifru_mtu member of the union.
    Ok(unsafe { ifr.ifr_ifru.ifru_mtu } as u32)
}

/// Test helper policy for tests that need root: true when the test may run. When not root it
/// returns false with a note on stderr, so the caller returns early; but under `CI=true` it
/// panics instead, so a CI run without root fails rather than silently passing.
pub fn root_or_skip(what: &str) -> bool {
    is_root() || skip_or_fail(what, "needs root (network namespaces)")
}

/// A test's precondition `why` is missing: under `CI=true` that is a failure (panics, so a test
/// that cannot run never passes there); otherwise prints a notice and returns false for the
/// caller to skip.
pub fn skip_or_fail(what: &str, why: &str) -> bool {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{what}: {why}, and CI=true: refusing to skip");
    }
    eprintln!("NOTICE: skipping {what}: {why} (set CI=true to make this a failure)");
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode(path: &str) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().ino()
    }

    #[test]
    fn offloads_and_mtu_round_trip() {
        if !root_or_skip("offloads_and_mtu_round_trip") {
            return;
        }
        let pid = std::process::id();
        let a = Netns::create(&format!("tio{pid}-off-a")).unwrap();
        let b = Netns::create(&format!("tio{pid}-off-b")).unwrap();
        veth_pair(a.name(), "oa", b.name(), "ob").unwrap();
        ip(&["-n", a.name(), "link", "set", "dev", "oa", "mtu", "9000"]).unwrap();
        a.run(|| {
            assert_eq!(mtu("oa").unwrap(), 9000);
            assert!(matches!(mtu("nosuch0"), Err(IoError::NoSuchInterface(_))));
            // veth starts with every offload on.
            let on = offloads("oa").unwrap();
            assert!(on.tx_checksum && on.tso && on.gso, "{on:?}");
            set_offloads("oa", &Offloads::OFF).unwrap();
            assert_eq!(offloads("oa").unwrap(), Offloads::OFF);
            let back = Offloads {
                tx_checksum: true,
                tso: true,
                gso: true,
                gro: true,
            };
            set_offloads("oa", &back).unwrap();
            assert_eq!(offloads("oa").unwrap(), back);
            assert!(matches!(
                set_offloads("nosuch0", &Offloads::OFF),
                Err(IoError::NoSuchInterface(_))
            ));
        })
        .unwrap();
        // The other end is untouched, and invisible from here.
        b.run(|| assert_eq!(mtu("ob").unwrap(), 1500)).unwrap();
        assert!(a.run(|| offloads("ob")).unwrap().is_err());
    }

    #[test]
    fn enter_and_leave() {
        if !root_or_skip("enter_and_leave") {
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
