//! Packet I/O behind one [`Port`] trait: AF_PACKET (TPACKET_V3), in-memory rings, AF_XDP; the
//! only crate of scalebricks that makes packet syscalls.
//!
//! # The model
//! A [`Port`] moves frames between the outside and a [`PacketBatch`], a fixed set of reusable
//! buffers owned by the caller:
//! - [`Port::rx_batch`] appends up to `batch.room()` received frames to the batch;
//! - [`Port::tx_batch`] transmits every frame of the batch and empties it (frames the backend
//!   could not take are counted in [`PortStats::tx_dropped`]).
//!
//! The buffers are allocated once, when the batch is made; receiving and transmitting only copy
//! bytes into and out of them, so a forwarding loop over two ports allocates nothing per packet
//! (a test counts allocations to keep it so). Frames keep [`batch::HEADROOM`] bytes in front so
//! an engine can push a tunnel header in place.
//!
//! Backends:
//! - [`memory`]: connected pairs of in-process ports ([`memory::pair`]), an L2 switch with one
//!   port per MAC address that forwards by destination MAC without a thread of its own
//!   ([`memory::switch()`], so N engine nodes run deterministically in one test process), and a
//!   replaying source ([`memory::ReplayPort`]) for tests and engine benchmarks.
//! - [`afpacket::AfPacketPort`]: AF_PACKET with a TPACKET_V3 receive ring (mmap'd blocks, the
//!   kernel hands over a whole block of frames at once; or a TPACKET_V2 frame ring for low
//!   latency, [`afpacket::RxMode`]) and a transmit path that bypasses the qdisc (`sendmmsg` or a
//!   TPACKET_V2 TX ring). Needs root (CAP_NET_RAW) only. The default.
//! - `xdp::XdpPort` (cargo feature `xdp`): AF_XDP in copy mode with a tiny XDP redirect program
//!   loaded through the `bpf()` syscall.
//!
//! [`wait_any`] sleeps on several ports at once. [`netns`] moves the calling thread into a named
//! network namespace and back, so a port can be opened inside a namespace (a socket stays in the
//! namespace it was created in), and makes namespaces and veth pairs for tests. [`cpu`] pins
//! threads and reads the CPU times benchmarks report. One core per port queue: AF_PACKET ports
//! on one interface share its traffic by flow hash with
//! [`afpacket::AfPacketConfig::fanout_group`].
//!
//! # Example: forwarding between in-memory ports
//! ```
//! use sb_io::{memory, PacketBatch, Port};
//!
//! // wire A: (outside_a) <-> (fwd_a); wire B: (fwd_b) <-> (outside_b)
//! let (mut outside_a, mut fwd_a) = memory::pair("a", 256);
//! let (mut fwd_b, mut outside_b) = memory::pair("b", 256);
//!
//! let mut batch = PacketBatch::new(32);
//! for i in 0..10u8 {
//!     batch.push(&[i; 60]);
//! }
//! assert_eq!(outside_a.tx_batch(&mut batch), 10);
//!
//! // The forwarder: receive on A, transmit on B, the same buffers every time.
//! let mut fwd = PacketBatch::new(32);
//! while fwd_a.rx_batch(&mut fwd) > 0 {
//!     fwd_b.tx_batch(&mut fwd);
//! }
//!
//! assert_eq!(outside_b.rx_batch(&mut batch), 10);
//! assert_eq!(batch.get(3), &[3u8; 60]);
//! assert_eq!(fwd_b.stats().tx_packets, 10);
//! ```
//!
//! # Cost model
//! Measured by `scalebricks bench io` (docs/bench/io.md: one pinned thread forwarding between two
//! veths, 2 shared vCPUs, numbers per CPU-second of the forwarding core, conservative accounting).
//! - A batch amortises every per-call cost (syscall, lock, ring-status read) over up to
//!   `capacity` frames; between 8 and 256 the batch size barely matters for kernel backends
//!   (the kernel's per-frame work dominates). 64 is the default ([`batch::DEFAULT_BATCH`]).
//! - [`memory`]: one mutex acquisition per batch plus one `memcpy` per frame each way:
//!   4-10 M 64-byte frames/s per core forwarded (the mutex bouncing between CPUs dominates).
//! - AF_PACKET: receiving makes no syscall while the ring holds ready blocks (a 256 KiB block
//!   holds ~2000 small frames; a block is handed over when full or after
//!   [`afpacket::AfPacketConfig::block_timeout_ms`], which bounds the added latency at low rates);
//!   per frame the kernel copies into the ring and we copy into the batch. Transmitting is one
//!   `sendmmsg` per batch (no qdisc), the kernel builds one skb per frame. 0.33-0.36 M 64-byte
//!   frames/s per core forwarded (sendmmsg; the TX ring is 5-10% slower; the V2 frame ring
//!   receives as fast as V3 blocks).
//! - AF_XDP copy mode: the kernel copies each received frame into the UMEM without building an
//!   skb; transmit is one `sendto` kick per 32 frames. 0.5-0.64 M 64-byte frames/s per core.

#![warn(missing_docs)]

pub mod afpacket;
pub mod cpu;
pub mod memory;
pub mod netns;
#[cfg(feature = "xdp")]
pub mod xdp;

/// The batch module, defined in [`sb_packet`] (a crate without I/O, so that the engine does not
/// depend on this one) and re-exported here under its old name: `sb_io::batch::HEADROOM`.
pub use sb_packet as batch;
pub use sb_packet::{Meta, PacketBatch};

use std::time::Duration;

/// Counters every port keeps. Monotonic from the port's creation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames handed to the caller by `rx_batch`.
    pub rx_packets: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Frames transmitted (accepted by the kernel or the peer ring).
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Frames lost on receive: the kernel ring was full, or a frame was larger than a batch buffer.
    pub rx_dropped: u64,
    /// Frames given to `tx_batch` that could not be transmitted (ring full, peer full).
    pub tx_dropped: u64,
    /// Receive-side errors (malformed ring entries, failed syscalls, frames with a partial
    /// checksum that could not be completed).
    pub rx_errors: u64,
    /// Frames dropped on receive because the kernel handed over only part of them (the
    /// captured length was shorter than the frame: larger than a ring frame). Never delivered
    /// as if complete.
    pub rx_truncated: u64,
    /// Frames received with a partial UDP/TCP checksum (from a local sender with transmit
    /// checksum offload, `TP_STATUS_CSUMNOTREADY`) whose checksum the port completed before
    /// handing them over.
    pub rx_csum_completed: u64,
    /// Transmit-side errors (failed syscalls other than "full").
    pub tx_errors: u64,
    /// Frames of `rx_packets` that came through an AF_XDP socket (an AF_XDP port, or the
    /// XDP fast path's slow path: `xdp::SlowPathPort`); 0 for other ports.
    pub rx_af_xdp: u64,
}

/// One network port: receives and transmits frames in batches.
///
/// Implementations never allocate per frame and never block in `rx_batch`/`tx_batch`; use
/// [`Port::wait_rx`] to sleep until frames may be ready.
pub trait Port: Send {
    /// A name for logs (the interface name for kernel-backed ports).
    fn name(&self) -> &str;

    /// Appends up to `batch.room()` received frames to `batch`; returns how many were appended
    /// (0 when nothing is pending). Never blocks.
    fn rx_batch(&mut self, batch: &mut PacketBatch) -> usize;

    /// Transmits every frame of `batch` in order and empties it; returns how many were
    /// transmitted. Frames that could not be (ring or peer full) are counted in
    /// [`PortStats::tx_dropped`]. Never blocks for long (at most a bounded wait for ring space).
    fn tx_batch(&mut self, batch: &mut PacketBatch) -> usize;

    /// Sleeps until a frame may be ready to receive or `timeout` passes. Returns true when the
    /// port signalled readiness (a following `rx_batch` may still return 0).
    fn wait_rx(&mut self, timeout: Duration) -> Result<bool, IoError>;

    /// The port's counters. Kernel-backed ports read the kernel's drop counters here (one
    /// `getsockopt`), so call it once a second, not per batch.
    fn stats(&self) -> PortStats;

    /// A descriptor that polls readable when frames may be ready (kernel-backed ports), for
    /// waiting on several ports at once with [`wait_any`]. `None` for in-memory ports.
    fn rx_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// Sleeps until one of `ports` may have frames to receive, or `timeout` passes. Returns the
/// indices that signalled through `ready` (cleared first). Ports without a descriptor are
/// checked by a zero-timeout [`Port::wait_rx`] first; if any of them is ready, nothing sleeps.
pub fn wait_any(
    ports: &mut [&mut dyn Port],
    timeout: Duration,
    ready: &mut Vec<usize>,
) -> Result<(), IoError> {
    ready.clear();
    let mut fds = [libc::pollfd {
        fd: -1,
        events: libc::POLLIN,
        revents: 0,
    }; 16];
    let mut with_fd = 0usize;
    let mut fd_less = false;
    for (i, p) in ports.iter_mut().enumerate() {
        match p.rx_fd() {
            Some(fd) if i < fds.len() => {
                fds[i].fd = fd;
                with_fd += 1;
            }
            _ => {
                fd_less = true;
                if p.wait_rx(Duration::ZERO)? {
                    ready.push(i);
                }
            }
        }
    }
    if !ready.is_empty() {
        return Ok(());
    }
    let n = ports.len().min(fds.len());
    // Without descriptors to sleep on, nap in short slices so fd-less ports are rechecked.
    let ms = if fd_less {
        timeout.min(Duration::from_millis(1))
    } else {
        timeout
    };
    if with_fd == 0 {
        std::thread::sleep(ms);
        return Ok(());
    }
    poll_fds(&mut fds[..n], ms)?;
    for (i, f) in fds[..n].iter().enumerate() {
        if f.fd >= 0 && f.revents & libc::POLLIN != 0 {
            ready.push(i);
        }
    }
    Ok(())
}

/// Sleeps until one of `fds` (sockets, say) is readable or `timeout` passes; returns which are
/// readable, in order. For a thread that serves several datagram sockets.
pub fn wait_readable(fds: &[std::os::fd::RawFd], timeout: Duration) -> Result<Vec<bool>, IoError> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    poll_fds(&mut p, timeout)?;
    Ok(p.iter().map(|f| f.revents & libc::POLLIN != 0).collect())
}

/// Sets a socket's receive and send buffers to `bytes` each, past the sysctl limits when the
/// process may (root: `SO_RCVBUFFORCE`), else as far as they allow. For datagram sockets that
/// take bursts (a PFCP endpoint, a load generator) and must not drop them in the kernel.
#[allow(unsafe_code)]
pub fn set_socket_buffers(fd: std::os::fd::RawFd, bytes: usize) -> Result<(), IoError> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    for (force, plain, name) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, "SO_RCVBUF"),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, "SO_SNDBUF"),
    ] {
        let set = |opt| {
            // SAFETY: a pointer to a c_int and its size; the kernel checks the fd.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    (&v as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            }
        };
        if set(force) != 0 && set(plain) != 0 {
            return Err(IoError::last(name));
        }
    }
    Ok(())
}

/// Sets the calling thread's nice value (threads spawned from it afterwards inherit it). A
/// value below 0 needs root or `CAP_SYS_NICE`.
#[allow(unsafe_code)]
pub fn set_thread_nice(nice: i32) -> Result<(), IoError> {
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
    // SAFETY: setpriority takes no pointers; an error is reported through its result.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } != 0 {
        return Err(IoError::last("setpriority"));
    }
    Ok(())
}

#[allow(unsafe_code)]
fn poll_fds(fds: &mut [libc::pollfd], timeout: Duration) -> Result<(), IoError> {
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: fds is a valid, exclusively borrowed pollfd array of the given length (entries
    // with fd -1 are ignored by the kernel).
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
        return Err(IoError::last("poll"));
    }
    Ok(())
}

impl<P: Port + ?Sized> Port for Box<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn rx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        (**self).rx_batch(batch)
    }
    fn tx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        (**self).tx_batch(batch)
    }
    fn wait_rx(&mut self, timeout: Duration) -> Result<bool, IoError> {
        (**self).wait_rx(timeout)
    }
    fn stats(&self) -> PortStats {
        (**self).stats()
    }
    fn rx_fd(&self) -> Option<std::os::fd::RawFd> {
        (**self).rx_fd()
    }
}

/// Errors from opening or driving a port, or from switching namespaces.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// No interface of that name exists in the calling thread's network namespace.
    #[error("no interface named {0:?} in this network namespace")]
    NoSuchInterface(String),
    /// An interface or namespace name is not usable (empty, too long, contains NUL or '/').
    #[error("invalid name {0:?}")]
    InvalidName(String),
    /// A system call failed.
    #[error("{op} failed: {source}")]
    Sys {
        /// What was being done.
        op: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Entering or leaving a network namespace failed.
    #[error("network namespace {name:?}: {source}")]
    Netns {
        /// The namespace name.
        name: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An external command (`ip`) failed.
    #[error("command `{cmd}` failed: {detail}")]
    Command {
        /// The command line.
        cmd: String,
        /// Its stderr or the spawn error.
        detail: String,
    },
    /// The running kernel or build does not support what was asked.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl IoError {
    /// Wraps the last OS error (errno) for operation `op`.
    pub(crate) fn last(op: &'static str) -> Self {
        IoError::Sys {
            op,
            source: std::io::Error::last_os_error(),
        }
    }
}
