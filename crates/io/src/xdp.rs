//! AF_XDP ports in copy mode (cargo feature `xdp`).
//!
//! One [`XdpPort`] owns, for one interface queue:
//! - a UMEM (an anonymous mapping cut into `frames` chunks of `frame_size` bytes), half of the
//!   chunks lent to the kernel through the fill ring for receiving, half kept for transmitting;
//! - the four rings (fill, completion, rx, tx), mmap'd from the socket;
//! - an AF_XDP socket bound with `XDP_COPY` (the kernel copies frames between skbs or XDP
//!   buffers and the UMEM; works on any driver, veth included);
//! - a 6-instruction XDP program, `return bpf_redirect_map(&xsks, ctx->rx_queue_index,
//!   XDP_PASS)`, written here as raw BPF instructions and loaded with the `bpf()` syscall (no BPF
//!   toolchain, no libbpf), plus its XSKMAP, attached with a BPF link (driver mode if the driver
//!   supports it, else generic/SKB mode). Closing the port detaches it.
//!
//! Receiving copies each frame from the UMEM into the caller's batch and returns the chunk to the
//! fill ring at once; transmitting copies each frame into a free UMEM chunk, publishes the
//! descriptors and kicks the kernel with `sendto` (in copy mode the kernel sends at most 32
//! frames per kick, so a batch of 64 takes two).
#![allow(unsafe_code)]

use crate::afpacket;
use crate::{IoError, PacketBatch, Port, PortStats};
use sb_common::Mmap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Where the XDP program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpMode {
    /// Driver (native) mode if the driver supports it, else generic.
    Auto,
    /// Driver mode only.
    Driver,
    /// Generic (SKB) mode: after the kernel built an skb.
    Generic,
}

/// Settings for [`XdpPort::open`].
#[derive(Clone, Debug)]
pub struct XdpConfig {
    /// Interface queue to bind (veth has one: 0).
    pub queue_id: u32,
    /// UMEM chunks (a power of two; half receive, half transmit).
    pub frames: u32,
    /// Bytes per chunk (2048 or 4096).
    pub frame_size: u32,
    /// Entries per ring (a power of two).
    pub ring_size: u32,
    /// Where to attach the redirect program.
    pub mode: XdpMode,
    /// Whether to load and attach the redirect program (default). False: the socket is bound
    /// and nothing else: a program of the caller's, attached to the interface, redirects into
    /// it (its XSKMAP's entry for the queue set to [`XdpPort::socket_fd`]), as the XDP fast
    /// path's slow path does ([`SlowPathPort`]).
    pub program: bool,
}

impl Default for XdpConfig {
    fn default() -> Self {
        XdpConfig {
            queue_id: 0,
            frames: 4096,
            frame_size: 2048,
            ring_size: 2048,
            mode: XdpMode::Auto,
            program: true,
        }
    }
}

// ---- the bpf() syscall ------------------------------------------------------------------------

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
    map_ifindex: u32,
}

#[repr(C)]
#[derive(Default)]
struct MapUpdateAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// One BPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8, // dst in the low nibble, src in the high nibble
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | (dst & 0xf),
        off,
        imm,
    }
}

/// `r2 = ctx->rx_queue_index; r1 = &xsks; r3 = XDP_PASS; return bpf_redirect_map(r1, r2, r3);`
fn redirect_program(map_fd: RawFd) -> [Insn; 6] {
    const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
    const LD_IMM64: u8 = 0x18; // BPF_LD | BPF_IMM | BPF_DW
    const MOV64_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
    const CALL: u8 = 0x85; // BPF_JMP | BPF_CALL
    const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT
    const PSEUDO_MAP_FD: u8 = 1;
    [
        insn(LDX_W, 2, 1, 16, 0), // offsetof(struct xdp_md, rx_queue_index) == 16
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_K, 3, 0, 0, XDP_PASS),
        insn(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        insn(EXIT, 0, 0, 0, 0),
    ]
}

/// bpf(cmd, attr, sizeof attr); returns the non-negative result or the errno as an error.
fn bpf<T>(cmd: libc::c_long, attr: &mut T, op: &'static str) -> Result<RawFd, IoError> {
    // SAFETY: attr is a live, fully initialised repr(C) prefix of union bpf_attr; the kernel
    // reads (and for some commands writes) at most size_of::<T>() bytes.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            (attr as *mut T).cast::<libc::c_void>(),
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(IoError::last(op));
    }
    Ok(r as RawFd)
}

fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: fd was just returned by the kernel to us and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Whether `fd` polled readable within `timeout`.
fn poll_in(fd: RawFd, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: p is one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    r > 0
}

/// The loaded redirect program, its XSKMAP and the link attaching it. Dropping detaches.
struct Program {
    // Field order = drop order: detach first.
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
    mode: XdpMode,
}

fn load_program(
    ifindex: i32,
    queue_id: u32,
    xsk_fd: RawFd,
    mode: XdpMode,
) -> Result<Program, IoError> {
    let mut mc = MapCreateAttr {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: (queue_id + 1).max(64),
        ..Default::default()
    };
    mc.map_name[..7].copy_from_slice(b"sb_xsks");
    let map = owned(bpf(BPF_MAP_CREATE, &mut mc, "bpf(BPF_MAP_CREATE xskmap)")?);
    let key = queue_id;
    let value = xsk_fd as u32;
    let mut up = MapUpdateAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        ..Default::default()
    };
    bpf(
        BPF_MAP_UPDATE_ELEM,
        &mut up,
        "bpf(BPF_MAP_UPDATE_ELEM xskmap)",
    )?;

    let insns = redirect_program(map.as_raw_fd());
    let license = b"Dual MIT/GPL\0";
    let mut log = vec![0u8; 1 << 16];
    let mut pl = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        expected_attach_type: BPF_XDP,
        ..Default::default()
    };
    pl.prog_name[..11].copy_from_slice(b"sb_redirect");
    let prog = match bpf(BPF_PROG_LOAD, &mut pl, "bpf(BPF_PROG_LOAD)") {
        Ok(fd) => owned(fd),
        Err(e) => {
            // Load again with the verifier log to say why.
            pl.log_level = 1;
            pl.log_size = log.len() as u32;
            pl.log_buf = log.as_mut_ptr() as u64;
            let _ = bpf(BPF_PROG_LOAD, &mut pl, "bpf(BPF_PROG_LOAD)");
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            return Err(IoError::Unsupported(format!(
                "{e}; verifier log: {}",
                String::from_utf8_lossy(&log[..end]).trim()
            )));
        }
    };
    let attach = |flags: u32| {
        let mut lc = LinkCreateAttr {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: ifindex as u32,
            attach_type: BPF_XDP,
            flags,
        };
        bpf(BPF_LINK_CREATE, &mut lc, "bpf(BPF_LINK_CREATE xdp)")
    };
    let (link, mode) = match mode {
        XdpMode::Driver => (attach(XDP_FLAGS_DRV_MODE)?, XdpMode::Driver),
        XdpMode::Generic => (attach(XDP_FLAGS_SKB_MODE)?, XdpMode::Generic),
        XdpMode::Auto => match attach(XDP_FLAGS_DRV_MODE) {
            Ok(l) => (l, XdpMode::Driver),
            Err(_) => (attach(XDP_FLAGS_SKB_MODE)?, XdpMode::Generic),
        },
    };
    Ok(Program {
        _link: owned(link),
        _prog: prog,
        _map: map,
        mode,
    })
}

// ---- rings ------------------------------------------------------------------------------------

/// One of the four single-producer/single-consumer rings shared with the kernel.
struct Ring {
    map: Mmap,
    producer: usize,
    consumer: usize,
    desc: usize,
    mask: u32,
    size: u32,
}

impl Ring {
    fn open(
        fd: RawFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        entry: usize,
        pgoff: u64,
        op: &'static str,
    ) -> Result<Ring, IoError> {
        let len = off.desc as usize + size as usize * entry;
        let map =
            Mmap::shared(fd, len, pgoff, true).map_err(|source| IoError::Sys { op, source })?;
        Ok(Ring {
            map,
            producer: off.producer as usize,
            consumer: off.consumer as usize,
            desc: off.desc as usize,
            mask: size - 1,
            size,
        })
    }

    #[inline]
    fn counter(&self, off: usize) -> &AtomicU32 {
        // SAFETY: producer/consumer offsets come from XDP_MMAP_OFFSETS and lie inside the
        // mapping; they are aligned u32s the kernel updates concurrently, so atomics only.
        unsafe { AtomicU32::from_ptr(self.map.as_ptr().add(off) as *mut u32) }
    }

    #[inline]
    fn prod(&self) -> &AtomicU32 {
        self.counter(self.producer)
    }

    #[inline]
    fn cons(&self) -> &AtomicU32 {
        self.counter(self.consumer)
    }

    /// Pointer to entry `idx` (masked) of `entry` bytes.
    #[inline]
    fn entry(&self, idx: u32, entry: usize) -> *mut u8 {
        let i = (idx & self.mask) as usize;
        debug_assert!(self.desc + (i + 1) * entry <= self.map.len());
        // SAFETY: i <= mask < size, and the mapping holds `size` entries after `desc`.
        unsafe { self.map.as_ptr().add(self.desc + i * entry) }
    }
}

const DESC: usize = std::mem::size_of::<libc::xdp_desc>();
const ADDR: usize = std::mem::size_of::<u64>();

/// An AF_XDP port in copy mode. See the module docs.
pub struct XdpPort {
    // Drop order matters: detach the program before closing the socket and unmapping.
    prog: Option<Program>,
    rx: Ring,
    tx: Ring,
    fill: Ring,
    comp: Ring,
    fd: OwnedFd,
    umem: Mmap,
    name: String,
    frame_size: u32,
    tx_free: Vec<u64>,
    /// Descriptors published to the tx ring and not yet consumed by the kernel.
    tx_outstanding: u32,
    stats: PortStats,
}

// SAFETY: the raw mappings are owned by the port and only touched through `&mut self` (or read
// atomically through `&self`); moving the port moves their ownership.
unsafe impl Send for XdpPort {}

fn sockopt<T>(fd: RawFd, opt: i32, val: &T, op: &'static str) -> Result<(), IoError> {
    // SAFETY: val is a live T of the given size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(IoError::last(op));
    }
    Ok(())
}

impl XdpPort {
    /// Opens interface `ifname` (in the calling thread's network namespace) in AF_XDP copy mode
    /// and attaches the redirect program to it.
    pub fn open(ifname: &str, cfg: &XdpConfig) -> Result<XdpPort, IoError> {
        let ifindex = afpacket::ifindex(ifname)?;
        let frames = cfg.frames.max(64).next_power_of_two();
        let frame_size = cfg.frame_size.clamp(2048, 4096).next_power_of_two();
        let ring_size = cfg.ring_size.max(64).next_power_of_two();
        // SAFETY: plain socket(2); the fd is owned below.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(IoError::last("socket(AF_XDP)"));
        }
        let fd = owned(raw);
        let umem =
            Mmap::anonymous((frames * frame_size) as usize).map_err(|source| IoError::Sys {
                op: "mmap UMEM",
                source,
            })?;
        let reg = libc::xdp_umem_reg {
            addr: umem.as_ptr() as u64,
            len: umem.len() as u64,
            chunk_size: frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        sockopt(raw, libc::XDP_UMEM_REG, &reg, "XDP_UMEM_REG")?;
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            sockopt(raw, opt, &ring_size, "XDP ring size")?;
        }
        // SAFETY: xdp_mmap_offsets is plain data; the kernel writes at most `len` bytes.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
        // SAFETY: as above.
        let r = unsafe {
            libc::getsockopt(
                raw,
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                (&mut off as *mut libc::xdp_mmap_offsets).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(IoError::last("XDP_MMAP_OFFSETS"));
        }
        let rx = Ring::open(
            raw,
            &off.rx,
            ring_size,
            DESC,
            libc::XDP_PGOFF_RX_RING as u64,
            "mmap rx ring",
        )?;
        let tx = Ring::open(
            raw,
            &off.tx,
            ring_size,
            DESC,
            libc::XDP_PGOFF_TX_RING as u64,
            "mmap tx ring",
        )?;
        let fill = Ring::open(
            raw,
            &off.fr,
            ring_size,
            ADDR,
            libc::XDP_UMEM_PGOFF_FILL_RING,
            "mmap fill ring",
        )?;
        let comp = Ring::open(
            raw,
            &off.cr,
            ring_size,
            ADDR,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            "mmap completion ring",
        )?;

        // Lend the receive half of the UMEM (at most a ring's worth) to the kernel.
        let rx_frames = (frames / 2).min(ring_size);
        for i in 0..rx_frames {
            // SAFETY: entry i < ring_size of the fill ring; we are its only producer.
            unsafe { std::ptr::write(fill.entry(i, ADDR) as *mut u64, (i * frame_size) as u64) };
        }
        fill.prod().store(rx_frames, Ordering::Release);
        let tx_free: Vec<u64> = (rx_frames..frames)
            .map(|i| (i * frame_size) as u64)
            .collect();

        let sxdp = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_COPY,
            sxdp_ifindex: ifindex as u32,
            sxdp_queue_id: cfg.queue_id,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: sxdp is a valid sockaddr_xdp and the length matches.
        let r = unsafe {
            libc::bind(
                raw,
                (&sxdp as *const libc::sockaddr_xdp).cast(),
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(IoError::last("bind(AF_XDP, XDP_COPY)"));
        }
        let prog = if cfg.program {
            Some(load_program(ifindex, cfg.queue_id, raw, cfg.mode)?)
        } else {
            None
        };
        Ok(XdpPort {
            prog,
            rx,
            tx,
            fill,
            comp,
            fd,
            umem,
            name: ifname.to_string(),
            frame_size,
            tx_free,
            tx_outstanding: 0,
            stats: PortStats::default(),
        })
    }

    /// Where the redirect program ended up running (None: the port loaded none,
    /// [`XdpConfig::program`]).
    pub fn mode(&self) -> Option<XdpMode> {
        self.prog.as_ref().map(|p| p.mode)
    }

    /// The AF_XDP socket, for an XSKMAP of the caller's ([`XdpConfig::program`] false).
    pub fn socket_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Moves completed transmit chunks back to the free list.
    fn reap(&mut self) {
        let prod = self.comp.prod().load(Ordering::Acquire);
        let mut cons = self.comp.cons().load(Ordering::Relaxed);
        while cons != prod {
            // SAFETY: entries between consumer and producer were written by the kernel.
            let addr = unsafe { std::ptr::read(self.comp.entry(cons, ADDR) as *const u64) };
            self.tx_free.push(addr & !(self.frame_size as u64 - 1));
            cons = cons.wrapping_add(1);
        }
        self.comp.cons().store(cons, Ordering::Release);
    }

    /// Asks the kernel to send what the tx ring holds; returns frames the device dropped.
    fn kick(&mut self) -> u64 {
        let mut dropped = 0;
        for _ in 0..(self.tx.size / 32 + 4) {
            // SAFETY: a zero-length sendto with no buffer only kicks the tx ring.
            let r = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            let pending =
                self.tx.prod().load(Ordering::Relaxed) != self.tx.cons().load(Ordering::Acquire);
            if r >= 0 && !pending {
                break;
            }
            if r < 0 {
                match std::io::Error::last_os_error().raw_os_error().unwrap_or(0) {
                    libc::EAGAIN | libc::EINTR => {}
                    libc::EBUSY => dropped += 1,
                    libc::ENOBUFS => {}
                    _ => {
                        self.stats.tx_errors += 1;
                        break;
                    }
                }
            }
            if !pending {
                break;
            }
            // Completion ring full stalls the kernel: make room.
            self.reap();
        }
        dropped
    }

    fn kernel_stats(&self) -> Option<libc::xdp_statistics> {
        // SAFETY: plain data; the kernel writes at most `len` bytes.
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
        // SAFETY: as above.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                (&mut st as *mut libc::xdp_statistics).cast(),
                &mut len,
            )
        };
        (r == 0).then_some(st)
    }
}

impl Port for XdpPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        let prod = self.rx.prod().load(Ordering::Acquire);
        let mut cons = self.rx.cons().load(Ordering::Relaxed);
        let mut fprod = self.fill.prod().load(Ordering::Relaxed);
        let mut n = 0;
        while cons != prod && !batch.is_full() {
            // SAFETY: entries between consumer and producer were written by the kernel.
            let d = unsafe { std::ptr::read(self.rx.entry(cons, DESC) as *const libc::xdp_desc) };
            cons = cons.wrapping_add(1);
            let (addr, len) = (d.addr as usize, d.len as usize);
            if addr + len <= self.umem.len() {
                // SAFETY: [addr, addr+len) is inside the UMEM (checked) and owned by us until
                // the chunk goes back on the fill ring below.
                let f = unsafe { std::slice::from_raw_parts(self.umem.as_ptr().add(addr), len) };
                if batch.push(f) {
                    n += 1;
                    self.stats.rx_bytes += len as u64;
                } else {
                    self.stats.rx_dropped += 1;
                }
            } else {
                self.stats.rx_errors += 1;
            }
            // SAFETY: the fill ring has room: we only return chunks the kernel handed us, and
            // at most ring_size chunks circulate on the receive side.
            unsafe {
                std::ptr::write(
                    self.fill.entry(fprod, ADDR) as *mut u64,
                    d.addr & !(self.frame_size as u64 - 1),
                )
            };
            fprod = fprod.wrapping_add(1);
        }
        self.rx.cons().store(cons, Ordering::Release);
        self.fill.prod().store(fprod, Ordering::Release);
        self.stats.rx_packets += n as u64;
        n
    }

    fn tx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        if batch.is_empty() {
            return 0;
        }
        self.reap();
        let mut prod = self.tx.prod().load(Ordering::Relaxed);
        let mut queued = 0u64;
        let max = self.frame_size as usize;
        for i in 0..batch.len() {
            let f = batch.get(i);
            let kcons = self.tx.cons().load(Ordering::Acquire);
            if f.len() > max {
                self.stats.tx_dropped += 1;
                continue;
            }
            if self.tx_free.is_empty() || prod.wrapping_sub(kcons) >= self.tx.size {
                self.tx.prod().store(prod, Ordering::Release);
                let d = self.kick();
                self.stats.tx_dropped += d;
                queued -= d.min(queued);
                self.reap();
                if self.tx_free.is_empty()
                    || prod.wrapping_sub(self.tx.cons().load(Ordering::Acquire)) >= self.tx.size
                {
                    self.stats.tx_dropped += (batch.len() - i) as u64;
                    break;
                }
            }
            let addr = self.tx_free.pop().unwrap_or(0);
            // SAFETY: the chunk at addr is ours (from the free list), f.len() <= chunk size, and
            // the tx entry at prod is free (checked against the kernel's consumer above).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    f.as_ptr(),
                    self.umem.as_ptr().add(addr as usize),
                    f.len(),
                );
                std::ptr::write(
                    self.tx.entry(prod, DESC) as *mut libc::xdp_desc,
                    libc::xdp_desc {
                        addr,
                        len: f.len() as u32,
                        options: 0,
                    },
                );
            }
            self.stats.tx_bytes += f.len() as u64;
            prod = prod.wrapping_add(1);
            queued += 1;
        }
        self.tx.prod().store(prod, Ordering::Release);
        let d = self.kick();
        self.stats.tx_dropped += d;
        queued -= d.min(queued);
        self.tx_outstanding = prod.wrapping_sub(self.tx.cons().load(Ordering::Acquire));
        self.stats.tx_packets += queued;
        batch.clear();
        queued as usize
    }

    fn wait_rx(&mut self, timeout: Duration) -> Result<bool, IoError> {
        if self.rx.prod().load(Ordering::Acquire) != self.rx.cons().load(Ordering::Relaxed) {
            return Ok(true);
        }
        Ok(poll_in(self.fd.as_raw_fd(), timeout))
    }

    fn rx_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn stats(&self) -> PortStats {
        let mut s = self.stats;
        s.rx_af_xdp = s.rx_packets;
        if let Some(k) = self.kernel_stats() {
            s.rx_dropped += k.rx_dropped + k.rx_ring_full;
            s.rx_errors += k.rx_invalid_descs;
            s.tx_errors += k.tx_invalid_descs;
        }
        s
    }
}

/// The redirect program of an [`XdpPort`], attached on its own ([`redirect_to`]); dropping
/// detaches it.
pub struct RedirectProgram {
    prog: Program,
}

impl RedirectProgram {
    /// Where it runs.
    pub fn mode(&self) -> XdpMode {
        self.prog.mode
    }
}

/// Attaches the 6-instruction redirect program to `ifname` (in the calling thread's network
/// namespace), its XSKMAP's entry for queue `queue_id` the AF_XDP socket `xsk_fd`: every frame
/// of that queue goes to the socket (a [`SlowPathPort`]'s, say), others up the kernel's path.
pub fn redirect_to(
    ifname: &str,
    queue_id: u32,
    xsk_fd: RawFd,
    mode: XdpMode,
) -> Result<RedirectProgram, IoError> {
    let ifindex = afpacket::ifindex(ifname)?;
    Ok(RedirectProgram {
        prog: load_program(ifindex, queue_id, xsk_fd, mode)?,
    })
}

/// The slow path of an XDP program of the caller's (the node's XDP fast path) on one interface
/// queue: an AF_XDP socket (copy mode, no program of its own: the caller puts
/// [`SlowPathPort::xsk_fd`] into its program's XSKMAP) receives the frames the program
/// redirects to it, and an AF_PACKET socket beside it receives what the program passes to the
/// kernel (`XDP_PASS`: frames too large for a UMEM chunk, frames while the XSKMAP entry is
/// empty, whatever the program leaves to the kernel) and transmits every frame (any size up
/// to the MTU, through the kernel's queueing as without XDP). Frames the program redirects
/// elsewhere or drops reach neither. Waiting polls both sockets through one epoll descriptor
/// ([`Port::rx_fd`]).
pub struct SlowPathPort {
    xsk: XdpPort,
    kernel: afpacket::AfPacketPort,
    epoll: OwnedFd,
    /// Frames received from the AF_XDP socket and from the AF_PACKET socket.
    from_xsk: u64,
    from_kernel: u64,
}

impl SlowPathPort {
    /// Opens both sockets on `ifname` (in the calling thread's network namespace): the AF_XDP
    /// socket on `xsk.queue_id` with `xsk`'s sizes (its `program` is ignored: none is
    /// loaded), the AF_PACKET socket with `kernel`.
    pub fn open(
        ifname: &str,
        xsk: &XdpConfig,
        kernel: &afpacket::AfPacketConfig,
    ) -> Result<SlowPathPort, IoError> {
        let cfg = XdpConfig {
            program: false,
            ..xsk.clone()
        };
        let xsk = XdpPort::open(ifname, &cfg)?;
        let kernel = afpacket::AfPacketPort::open(ifname, kernel)?;
        // SAFETY: plain epoll_create1; the fd is owned below.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(IoError::last("epoll_create1"));
        }
        let epoll = owned(ep);
        for fd in [xsk.socket_fd(), kernel.rx_fd().unwrap_or(-1)] {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            // SAFETY: ev is a valid epoll_event; both fds are open and owned by the port.
            if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
                return Err(IoError::last("epoll_ctl"));
            }
        }
        Ok(SlowPathPort {
            xsk,
            kernel,
            epoll,
            from_xsk: 0,
            from_kernel: 0,
        })
    }

    /// The AF_XDP socket, for the program's XSKMAP entry of this queue.
    pub fn xsk_fd(&self) -> RawFd {
        self.xsk.socket_fd()
    }

    /// Frames received so far from the AF_XDP socket and from the AF_PACKET socket.
    pub fn received(&self) -> (u64, u64) {
        (self.from_xsk, self.from_kernel)
    }
}

impl Port for SlowPathPort {
    fn name(&self) -> &str {
        self.xsk.name()
    }

    fn rx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        let a = self.xsk.rx_batch(batch);
        let b = self.kernel.rx_batch(batch);
        self.from_xsk += a as u64;
        self.from_kernel += b as u64;
        a + b
    }

    fn tx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        self.kernel.tx_batch(batch)
    }

    fn wait_rx(&mut self, timeout: Duration) -> Result<bool, IoError> {
        if self.xsk.wait_rx(Duration::ZERO)? {
            return Ok(true);
        }
        Ok(poll_in(self.epoll.as_raw_fd(), timeout))
    }

    fn rx_fd(&self) -> Option<RawFd> {
        Some(self.epoll.as_raw_fd())
    }

    fn stats(&self) -> PortStats {
        let (x, k) = (self.xsk.stats(), self.kernel.stats());
        PortStats {
            rx_packets: x.rx_packets + k.rx_packets,
            rx_bytes: x.rx_bytes + k.rx_bytes,
            rx_dropped: x.rx_dropped + k.rx_dropped,
            rx_errors: x.rx_errors + k.rx_errors,
            rx_af_xdp: self.from_xsk,
            ..k
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_encoding() {
        let p = redirect_program(7);
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        assert_eq!((p[0].code, p[0].regs, p[0].off), (0x61, 0x12, 16));
        assert_eq!((p[1].code, p[1].regs, p[1].imm), (0x18, 0x11, 7));
        assert_eq!((p[4].code, p[4].imm), (0x85, 51));
        assert_eq!(p[5].code, 0x95);
        assert_eq!(std::mem::size_of::<ProgLoadAttr>(), 72);
    }
}
