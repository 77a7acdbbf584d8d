//! AF_PACKET ports: a TPACKET_V3 receive ring and a qdisc-bypassing transmit path.
//!
//! Two sockets are bound to the interface:
//! - the receive socket (`ETH_P_ALL`, `PACKET_IGNORE_OUTGOING` so it does not see this port's
//!   own transmissions) with a TPACKET_V3 ring: the kernel fills fixed-size blocks with frames
//!   and flips a block's status to "user" when it is full or its timeout
//!   ([`AfPacketConfig::block_timeout_ms`]) passes; [`Port::rx_batch`] walks the ready blocks,
//!   copies frames into the batch and hands each finished block back. No syscall while blocks
//!   are ready. At low rates a frame waits for the block timeout (~1 ms measured), so
//!   latency-sensitive ports (a sink measuring latency, a node under modest load) should choose
//!   [`RxMode::Frames`]: a TPACKET_V2 ring where each frame is handed over at once (~3 us
//!   measured), at about the same throughput.
//! - the transmit socket (protocol 0, so it receives nothing) with `PACKET_QDISC_BYPASS`: frames
//!   go straight to the driver. [`TxMode::Sendmmsg`] passes the batch's buffers to one
//!   `sendmmsg` per batch; [`TxMode::Ring`] copies frames into a TPACKET_V2 TX ring and kicks it
//!   with one `send`. `scalebricks bench io` measures both.
//!
//! Several ports on one interface can share its traffic, one port per core: ports opened with
//! the same [`AfPacketConfig::fanout_group`] form a `PACKET_FANOUT_HASH` group, in which the
//! kernel hands each received frame to exactly one member, chosen by the flow hash of its
//! headers, so all frames of a flow reach the same port in order. Group ids are scoped to the
//! network namespace; every member must be opened with the same ring settings. Ports without a
//! group (or in another group) on the same interface each see every frame.
//!
//! VLAN tags the kernel moved into packet metadata are put back into the frame, so a port
//! returns frames as they were on the wire. A port never hands over a frame that is not what a
//! wire would carry:
//! - a frame the kernel cut short (larger than a frame-ring slot, 2048 bytes in
//!   [`RxMode::Frames`]; `tp_snaplen < tp_len`) is dropped and counted in
//!   [`PortStats::rx_truncated`];
//! - a frame from a local sender with transmit checksum offload arrives with only the
//!   pseudo-header sum in its UDP/TCP checksum field (`TP_STATUS_CSUMNOTREADY`); the port
//!   computes the checksum ([`PortStats::rx_csum_completed`]), or drops the frame
//!   ([`PortStats::rx_errors`]) if it is not UDP/TCP over IPv4/IPv6 without extension headers.
//!
//! Segmentation offloads (TSO/GSO on the sending veth, GRO on the receiving one) make a kernel
//! TCP connection's data arrive as one super-frame of up to 64 KB; switch them off on links a
//! port serves ([`crate::netns::set_offloads`]; `sb-topology` does so for every link it makes).
#![allow(unsafe_code)]

use crate::{IoError, PacketBatch, Port, PortStats};
use sb_common::Mmap;
use std::cell::Cell;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Frames per `sendmmsg` batch the transmit path has room for when the port opens.
const TX_PREALLOC: usize = 256;
/// How [`AfPacketPort`] transmits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxMode {
    /// One `sendmmsg` per batch pointing at the batch's buffers (the kernel copies each frame
    /// into an skb).
    Sendmmsg,
    /// A TPACKET_V2 TX ring: frames are copied into the mmap'd ring, one `send` per batch kicks
    /// the kernel.
    Ring,
}

impl std::str::FromStr for TxMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sendmmsg" => Ok(TxMode::Sendmmsg),
            "ring" => Ok(TxMode::Ring),
            _ => Err(format!("unknown tx mode {s:?} (sendmmsg|ring)")),
        }
    }
}

/// How [`AfPacketPort`] receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxMode {
    /// TPACKET_V3 block ring: the kernel hands over a whole block of frames when it is full or
    /// its timeout passes. Fewest status writes per frame; at low rates a frame waits up to
    /// [`AfPacketConfig::block_timeout_ms`] (about 1 ms measured).
    Blocks,
    /// TPACKET_V2 frame ring: each frame is handed over as soon as it is written. For latency
    /// measurements and latency-sensitive ports (tens of microseconds instead of ~1 ms at low
    /// rates).
    Frames,
}

impl std::str::FromStr for RxMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "blocks" | "v3" => Ok(RxMode::Blocks),
            "frames" | "v2" => Ok(RxMode::Frames),
            _ => Err(format!("unknown rx mode {s:?} (blocks|frames)")),
        }
    }
}

/// Settings for [`AfPacketPort::open`]. `Default` is what the engine uses.
#[derive(Clone, Debug)]
pub struct AfPacketConfig {
    /// Put the interface in promiscuous mode while the port is open.
    pub promiscuous: bool,
    /// Receive ring layout.
    pub rx_mode: RxMode,
    /// Frames in the receive ring ([`RxMode::Frames`] only).
    pub rx_frames: usize,
    /// Bytes per receive block (a power of two, multiple of the page size).
    pub block_size: usize,
    /// Number of receive blocks.
    pub block_count: usize,
    /// Milliseconds after which the kernel hands over a block that is not full (bounds the
    /// latency added at low rates).
    pub block_timeout_ms: u32,
    /// Transmit path.
    pub tx_mode: TxMode,
    /// Frames in the TX ring ([`TxMode::Ring`] only).
    pub tx_ring_frames: usize,
    /// Bytes per TX ring frame ([`TxMode::Ring`] only; a power of two >= 2048 for 1500-byte MTU).
    pub tx_frame_size: usize,
    /// Set `PACKET_QDISC_BYPASS` on the transmit socket.
    pub qdisc_bypass: bool,
    /// Set `PACKET_IGNORE_OUTGOING` on the receive socket (kernel >= 4.20).
    pub ignore_outgoing: bool,
    /// Do not open a receive ring (a transmit-only port, e.g. a traffic generator).
    pub tx_only: bool,
    /// Join receive fanout group `id` (`PACKET_FANOUT_HASH`): ports on the same interface with
    /// the same id split its traffic by flow hash, one port per core.
    pub fanout_group: Option<u16>,
}

impl Default for AfPacketConfig {
    fn default() -> Self {
        AfPacketConfig {
            promiscuous: false,
            rx_mode: RxMode::Blocks,
            rx_frames: 4096,
            block_size: 1 << 18,
            block_count: 16,
            block_timeout_ms: 1,
            tx_mode: TxMode::Sendmmsg,
            tx_ring_frames: 2048,
            tx_frame_size: 2048,
            qdisc_bypass: true,
            ignore_outgoing: true,
            tx_only: false,
            fanout_group: None,
        }
    }
}

/// A shared, prefaulted mapping of the socket's ring.
fn ring_map(fd: RawFd, len: usize) -> Result<Mmap, IoError> {
    Mmap::shared(fd, len, 0, true).map_err(|source| IoError::Sys {
        op: "mmap packet ring",
        source,
    })
}

/// Receive ring state.
struct RxRing {
    map: Mmap,
    block_size: usize,
    block_count: usize,
    /// Block we read next.
    cur: usize,
    /// Frames left in the current block (0: block not held).
    remaining: u32,
    /// Offset of the next frame inside the current block.
    offset: usize,
    /// Frame ring (TPACKET_V2) instead of blocks: `block_size` is then the frame size,
    /// `block_count` the number of frames and `cur` the next frame.
    frames: bool,
}

enum TxPath {
    Sendmmsg {
        msgs: Vec<libc::mmsghdr>,
        iovs: Vec<libc::iovec>,
    },
    Ring {
        map: Mmap,
        frame_size: usize,
        frames: usize,
        cur: usize,
    },
}

/// An AF_PACKET port bound to one interface. See the module docs.
pub struct AfPacketPort {
    name: String,
    ifindex: i32,
    mac: [u8; 6],
    rx_fd: Option<OwnedFd>,
    tx_fd: OwnedFd,
    rx: Option<RxRing>,
    tx: TxPath,
    stats: PortStats,
    kernel_drops: Cell<u64>,
}

// SAFETY: the raw pointers inside (ring mappings, iovec/msghdr scratch arrays) point into memory
// owned by this port and are only used through `&mut self`; moving the port to another thread
// moves that ownership with it.
unsafe impl Send for AfPacketPort {}

/// `TPACKET2_HDRLEN - sizeof(sockaddr_ll)`: where frame data starts in a V2 TX ring frame.
const TX_DATA_OFFSET: usize = libc::TPACKET2_HDRLEN - std::mem::size_of::<libc::sockaddr_ll>();

fn setsockopt<T>(
    fd: RawFd,
    level: i32,
    opt: i32,
    val: &T,
    op: &'static str,
) -> Result<(), IoError> {
    // SAFETY: val points to a live T of the given size for the duration of the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
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

fn packet_socket() -> Result<OwnedFd, IoError> {
    // SAFETY: plain socket(2) call; the returned fd is owned by the OwnedFd below.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(IoError::last("socket(AF_PACKET)"));
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn bind(fd: RawFd, ifindex: i32, protocol: u16) -> Result<(), IoError> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid starting value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex;
    // SAFETY: sll is a valid sockaddr_ll and the length matches it.
    let r = unsafe {
        libc::bind(
            fd,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(IoError::last("bind(AF_PACKET)"));
    }
    Ok(())
}

/// The ifindex of interface `name` in the calling thread's network namespace.
pub fn ifindex(name: &str) -> Result<i32, IoError> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(IoError::InvalidName(name.to_string()));
    }
    let c = CString::new(name).map_err(|_| IoError::InvalidName(name.to_string()))?;
    // SAFETY: c is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(IoError::NoSuchInterface(name.to_string()));
    }
    Ok(idx as i32)
}

fn hw_addr(fd: RawFd) -> [u8; 6] {
    // SAFETY: sockaddr_ll is plain data; getsockname writes at most `len` bytes into it.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: as above; a failure leaves sll zeroed.
    unsafe { libc::getsockname(fd, (&mut sll as *mut libc::sockaddr_ll).cast(), &mut len) };
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&sll.sll_addr[..6]);
    mac
}

/// The MAC address of interface `name` in the calling thread's network namespace.
pub fn mac_address(name: &str) -> Result<[u8; 6], IoError> {
    let idx = ifindex(name)?;
    let fd = packet_socket()?;
    bind(fd.as_raw_fd(), idx, 0)?;
    Ok(hw_addr(fd.as_raw_fd()))
}

impl AfPacketPort {
    /// Opens interface `ifname` in the calling thread's network namespace (see
    /// [`crate::netns::in_netns`] to open one in another namespace).
    pub fn open(ifname: &str, cfg: &AfPacketConfig) -> Result<AfPacketPort, IoError> {
        let ifindex = ifindex(ifname)?;
        let (rx_fd, rx) = if cfg.tx_only {
            (None, None)
        } else {
            let (fd, ring) = Self::open_rx(ifindex, cfg)?;
            (Some(fd), Some(ring))
        };
        let (tx_fd, tx) = Self::open_tx(ifindex, cfg)?;
        let mac = hw_addr(tx_fd.as_raw_fd());
        Ok(AfPacketPort {
            name: ifname.to_string(),
            ifindex,
            mac,
            rx_fd,
            tx_fd,
            rx,
            tx,
            stats: PortStats::default(),
            kernel_drops: Cell::new(0),
        })
    }

    fn open_rx(ifindex: i32, cfg: &AfPacketConfig) -> Result<(OwnedFd, RxRing), IoError> {
        let fd = packet_socket()?;
        let raw = fd.as_raw_fd();
        if cfg.rx_mode == RxMode::Frames {
            return Self::open_rx_frames(fd, ifindex, cfg);
        }
        let v3: libc::c_int = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        setsockopt(
            raw,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &v3,
            "PACKET_VERSION V3",
        )?;
        if cfg.ignore_outgoing {
            let one: libc::c_int = 1;
            setsockopt(
                raw,
                libc::SOL_PACKET,
                libc::PACKET_IGNORE_OUTGOING,
                &one,
                "PACKET_IGNORE_OUTGOING",
            )?;
        }
        let page = 4096usize;
        let block_size = cfg.block_size.max(page).next_power_of_two();
        let block_count = cfg.block_count.max(2);
        let frame_size = 2048u32;
        let req = libc::tpacket_req3 {
            tp_block_size: block_size as u32,
            tp_block_nr: block_count as u32,
            tp_frame_size: frame_size,
            tp_frame_nr: (block_size / frame_size as usize * block_count) as u32,
            tp_retire_blk_tov: cfg.block_timeout_ms.max(1),
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(
            raw,
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            &req,
            "PACKET_RX_RING",
        )?;
        let map = ring_map(raw, block_size * block_count)?;
        Self::rx_options(raw, ifindex, cfg)?;
        Ok((
            fd,
            RxRing {
                map,
                block_size,
                block_count,
                cur: 0,
                remaining: 0,
                offset: 0,
                frames: false,
            },
        ))
    }

    fn rx_options(raw: RawFd, ifindex: i32, cfg: &AfPacketConfig) -> Result<(), IoError> {
        bind(raw, ifindex, libc::ETH_P_ALL as u16)?;
        if cfg.promiscuous {
            let mreq = libc::packet_mreq {
                mr_ifindex: ifindex,
                mr_type: libc::PACKET_MR_PROMISC as u16,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            setsockopt(
                raw,
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                &mreq,
                "PACKET_ADD_MEMBERSHIP promisc",
            )?;
        }
        if let Some(id) = cfg.fanout_group {
            const PACKET_FANOUT_HASH: u32 = 0;
            let arg: libc::c_int = (id as u32 | (PACKET_FANOUT_HASH << 16)) as libc::c_int;
            setsockopt(
                raw,
                libc::SOL_PACKET,
                libc::PACKET_FANOUT,
                &arg,
                "PACKET_FANOUT",
            )?;
        }
        Ok(())
    }

    fn open_rx_frames(
        fd: OwnedFd,
        ifindex: i32,
        cfg: &AfPacketConfig,
    ) -> Result<(OwnedFd, RxRing), IoError> {
        let raw = fd.as_raw_fd();
        let v2: libc::c_int = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        setsockopt(
            raw,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &v2,
            "PACKET_VERSION V2",
        )?;
        if cfg.ignore_outgoing {
            let one: libc::c_int = 1;
            setsockopt(
                raw,
                libc::SOL_PACKET,
                libc::PACKET_IGNORE_OUTGOING,
                &one,
                "PACKET_IGNORE_OUTGOING",
            )?;
        }
        let frame_size = 2048usize;
        let block_size = 1usize << 16;
        let per_block = block_size / frame_size;
        let blocks = cfg.rx_frames.max(per_block).div_ceil(per_block);
        let frames = blocks * per_block;
        let req = libc::tpacket_req {
            tp_block_size: block_size as u32,
            tp_block_nr: blocks as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: frames as u32,
        };
        setsockopt(
            raw,
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            &req,
            "PACKET_RX_RING",
        )?;
        let map = ring_map(raw, block_size * blocks)?;
        Self::rx_options(raw, ifindex, cfg)?;
        Ok((
            fd,
            RxRing {
                map,
                block_size: frame_size,
                block_count: frames,
                cur: 0,
                remaining: 0,
                offset: 0,
                frames: true,
            },
        ))
    }

    fn open_tx(ifindex: i32, cfg: &AfPacketConfig) -> Result<(OwnedFd, TxPath), IoError> {
        let fd = packet_socket()?;
        let raw = fd.as_raw_fd();
        if cfg.qdisc_bypass {
            let one: libc::c_int = 1;
            setsockopt(
                raw,
                libc::SOL_PACKET,
                libc::PACKET_QDISC_BYPASS,
                &one,
                "PACKET_QDISC_BYPASS",
            )?;
        }
        let sndbuf: libc::c_int = 4 << 20;
        // A larger send buffer lets more skbs be in flight; failure just keeps the default.
        let _ = setsockopt(raw, libc::SOL_SOCKET, libc::SO_SNDBUF, &sndbuf, "SO_SNDBUF");
        let path = match cfg.tx_mode {
            // Room for batches of up to TX_PREALLOC frames from the start, so a port allocates
            // nothing after it is opened unless a caller sends a larger batch (it then grows
            // once to that size).
            TxMode::Sendmmsg => TxPath::Sendmmsg {
                // SAFETY: mmsghdr is plain data; zeroed is a valid value.
                msgs: vec![unsafe { std::mem::zeroed() }; TX_PREALLOC],
                iovs: vec![
                    libc::iovec {
                        iov_base: std::ptr::null_mut(),
                        iov_len: 0,
                    };
                    TX_PREALLOC
                ],
            },
            TxMode::Ring => {
                let v2: libc::c_int = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
                setsockopt(
                    raw,
                    libc::SOL_PACKET,
                    libc::PACKET_VERSION,
                    &v2,
                    "PACKET_VERSION V2",
                )?;
                let frame_size = cfg.tx_frame_size.max(2048).next_power_of_two();
                let frames = cfg.tx_ring_frames.max(64);
                let block_size = frame_size.max(1 << 16);
                let per_block = block_size / frame_size;
                let blocks = frames.div_ceil(per_block);
                let frames = blocks * per_block;
                let req = libc::tpacket_req {
                    tp_block_size: block_size as u32,
                    tp_block_nr: blocks as u32,
                    tp_frame_size: frame_size as u32,
                    tp_frame_nr: frames as u32,
                };
                setsockopt(
                    raw,
                    libc::SOL_PACKET,
                    libc::PACKET_TX_RING,
                    &req,
                    "PACKET_TX_RING",
                )?;
                let map = ring_map(raw, block_size * blocks)?;
                TxPath::Ring {
                    map,
                    frame_size,
                    frames,
                    cur: 0,
                }
            }
        };
        bind(raw, ifindex, 0)?;
        Ok((fd, path))
    }

    /// The interface's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The interface index (in the namespace the port was opened in).
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// Reads (and resets) the kernel's receive counters, accumulating drops.
    fn poll_kernel_stats(&self) {
        let Some(fd) = &self.rx_fd else { return };
        let mut st = libc::tpacket_stats_v3 {
            tp_packets: 0,
            tp_drops: 0,
            tp_freeze_q_cnt: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: st is a live tpacket_stats_v3 and len its size; the kernel writes at most len.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats_v3).cast(),
                &mut len,
            )
        };
        if r == 0 {
            self.kernel_drops
                .set(self.kernel_drops.get() + st.tp_drops as u64);
        }
    }

    #[inline]
    fn block_status(ring: &RxRing, block: usize) -> &AtomicU32 {
        debug_assert!(block < ring.block_count);
        // SAFETY: the block descriptor starts each block (inside the mapping); block_status is
        // a naturally aligned u32 shared with the kernel, so it is accessed atomically only.
        unsafe {
            let bd =
                ring.map.as_ptr().add(block * ring.block_size) as *mut libc::tpacket_block_desc;
            AtomicU32::from_ptr(std::ptr::addr_of_mut!((*bd).hdr.bh1.block_status))
        }
    }

    #[inline]
    fn frame_status(ring: &RxRing, frame: usize) -> &AtomicU32 {
        debug_assert!(frame < ring.block_count);
        // SAFETY: frame < frame count, so its tpacket2_hdr (status first) lies inside the
        // mapping; the status is an aligned u32 shared with the kernel, accessed atomically.
        unsafe {
            let h = ring.map.as_ptr().add(frame * ring.block_size) as *mut libc::tpacket2_hdr;
            AtomicU32::from_ptr(std::ptr::addr_of_mut!((*h).tp_status))
        }
    }

    /// Receive from a TPACKET_V2 frame ring.
    fn rx_frames(&mut self, batch: &mut PacketBatch) -> usize {
        let Some(ring) = &mut self.rx else { return 0 };
        let mut n = 0usize;
        while !batch.is_full() {
            let status = Self::frame_status(ring, ring.cur);
            let st = status.load(Ordering::Acquire);
            if st & libc::TP_STATUS_USER == 0 {
                break;
            }
            let base = ring.cur * ring.block_size;
            // SAFETY: the frame is ours (status USER) and its header lies inside the mapping.
            let h =
                unsafe { std::ptr::read(ring.map.as_ptr().add(base) as *const libc::tpacket2_hdr) };
            let mac = h.tp_mac as usize;
            let len = h.tp_snaplen as usize;
            if mac + len > ring.block_size {
                self.stats.rx_errors += 1;
            } else {
                // SAFETY: [base + mac, base + mac + len) is inside this frame (checked above).
                let frame =
                    unsafe { std::slice::from_raw_parts(ring.map.as_ptr().add(base + mac), len) };
                let info = FrameInfo {
                    status: st,
                    wire_len: h.tp_len,
                    vlan_tci: h.tp_vlan_tci,
                    vlan_tpid: h.tp_vlan_tpid,
                };
                if take_frame(&mut self.stats, batch, frame, &info) {
                    n += 1;
                }
            }
            status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            ring.cur = (ring.cur + 1) % ring.block_count;
        }
        self.stats.rx_packets += n as u64;
        n
    }

    fn tx_sendmmsg(&mut self, batch: &mut PacketBatch) -> usize {
        let TxPath::Sendmmsg { msgs, iovs } = &mut self.tx else {
            unreachable!("called for the sendmmsg path only")
        };
        let n = batch.len();
        if msgs.len() < n {
            // Grows to the largest batch seen, once; never per packet.
            // SAFETY: mmsghdr/iovec are plain data; zeroed is a valid value.
            msgs.resize(n, unsafe { std::mem::zeroed() });
            iovs.resize(
                n,
                libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                },
            );
        }
        let mut bytes = 0u64;
        for i in 0..n {
            let f = batch.get(i);
            let (p, len) = (f.as_ptr(), f.len());
            bytes += len as u64;
            iovs[i] = libc::iovec {
                iov_base: p as *mut libc::c_void,
                iov_len: len,
            };
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = std::ptr::null_mut();
            h.msg_namelen = 0;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
        }
        let fd = self.tx_fd.as_raw_fd();
        let mut off = 0usize;
        let mut sent = 0usize;
        let mut waited = false;
        while off < n {
            // SAFETY: msgs[off..n] are initialised mmsghdrs whose iovecs point into `batch`,
            // which is borrowed (unchanged) for the whole call.
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    msgs.as_mut_ptr().add(off),
                    (n - off) as u32,
                    libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                off += r as usize;
                sent += r as usize;
                continue;
            }
            let err = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            match err {
                libc::EINTR => {}
                libc::EAGAIN if !waited => {
                    // Socket send buffer full: give the kernel up to 1 ms to free skbs.
                    waited = true;
                    poll_fd(fd, libc::POLLOUT, 1);
                }
                libc::EAGAIN => {
                    self.stats.tx_dropped += (n - off) as u64;
                    bytes -= iovs[off..n].iter().map(|v| v.iov_len as u64).sum::<u64>();
                    break;
                }
                libc::ENOBUFS => {
                    // The device dropped this frame (e.g. veth peer backlog full).
                    self.stats.tx_dropped += 1;
                    bytes -= iovs[off].iov_len as u64;
                    off += 1;
                }
                _ => {
                    self.stats.tx_errors += 1;
                    self.stats.tx_dropped += 1;
                    bytes -= iovs[off].iov_len as u64;
                    off += 1;
                }
            }
        }
        self.stats.tx_bytes += bytes;
        sent
    }

    fn tx_ring(&mut self, batch: &mut PacketBatch) -> usize {
        let TxPath::Ring {
            map,
            frame_size,
            frames,
            cur,
        } = &mut self.tx
        else {
            unreachable!("called for the ring path only")
        };
        let fd = self.tx_fd.as_raw_fd();
        let max_len = *frame_size - TX_DATA_OFFSET;
        let mut queued = 0usize;
        let mut kicked = false;
        let mut i = 0;
        while i < batch.len() {
            let f = batch.get(i);
            if f.len() > max_len {
                self.stats.tx_dropped += 1;
                i += 1;
                continue;
            }
            // SAFETY: frame `cur` lies inside the mapping (cur < frames); tp_status is an
            // aligned u32 shared with the kernel and accessed atomically.
            let (hdr, status) = unsafe {
                let hdr = map.as_ptr().add(*cur * *frame_size) as *mut libc::tpacket2_hdr;
                (
                    hdr,
                    AtomicU32::from_ptr(std::ptr::addr_of_mut!((*hdr).tp_status)),
                )
            };
            let st = status.load(Ordering::Acquire);
            if st == libc::TP_STATUS_WRONG_FORMAT {
                self.stats.tx_errors += 1;
                status.store(libc::TP_STATUS_AVAILABLE, Ordering::Release);
            } else if st != libc::TP_STATUS_AVAILABLE {
                // Ring full of frames in flight: kick once and wait briefly, else drop the rest.
                if !kicked {
                    kicked = true;
                    // SAFETY: a zero-length send on our socket only kicks the TX ring.
                    unsafe { libc::send(fd, std::ptr::null(), 0, libc::MSG_DONTWAIT) };
                    poll_fd(fd, libc::POLLOUT, 1);
                    continue;
                }
                self.stats.tx_dropped += (batch.len() - i) as u64;
                break;
            }
            // SAFETY: the frame is ours (status AVAILABLE) until we publish SEND_REQUEST; the
            // data area [TX_DATA_OFFSET, TX_DATA_OFFSET + len) fits in the frame (checked above).
            unsafe {
                let data = (hdr as *mut u8).add(TX_DATA_OFFSET);
                std::ptr::copy_nonoverlapping(f.as_ptr(), data, f.len());
                (*hdr).tp_len = f.len() as u32;
            }
            status.store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.stats.tx_bytes += f.len() as u64;
            *cur = (*cur + 1) % *frames;
            queued += 1;
            i += 1;
        }
        if queued > 0 {
            loop {
                // SAFETY: a zero-length send with no buffer kicks the TX ring.
                let r = unsafe { libc::send(fd, std::ptr::null(), 0, libc::MSG_DONTWAIT) };
                if r >= 0 {
                    break;
                }
                let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                if e == libc::EINTR {
                    continue;
                }
                if e != libc::EAGAIN && e != libc::ENOBUFS {
                    self.stats.tx_errors += 1;
                }
                break;
            }
        }
        queued
    }
}

/// What the ring header says about one received frame.
struct FrameInfo {
    /// `tp_status`.
    status: u32,
    /// `tp_len`: the frame's length on the wire (the captured part is `tp_snaplen` long).
    wire_len: u32,
    vlan_tci: u16,
    vlan_tpid: u16,
}

/// Appends one frame the kernel handed over (`frame` is its captured part) to `batch` and
/// counts it: a truncated frame is dropped (`rx_truncated`), a frame larger than the batch's
/// buffers too (`rx_dropped`); a partial UDP/TCP checksum is completed (`rx_csum_completed`),
/// or the frame dropped (`rx_errors`) when it cannot be. True if the frame was appended.
#[inline]
fn take_frame(stats: &mut PortStats, batch: &mut PacketBatch, frame: &[u8], f: &FrameInfo) -> bool {
    if (frame.len() as u64) < u64::from(f.wire_len) {
        stats.rx_truncated += 1;
        return false;
    }
    if !push_frame(batch, frame, f.status, f.vlan_tci, f.vlan_tpid) {
        stats.rx_dropped += 1; // larger than the batch's buffers
        return false;
    }
    if f.status & libc::TP_STATUS_CSUMNOTREADY != 0 {
        let last = batch.len() - 1;
        if complete_l4_checksum(batch.get_mut(last)) {
            stats.rx_csum_completed += 1;
        } else {
            batch.pop();
            stats.rx_errors += 1;
            return false;
        }
    }
    stats.rx_bytes += frame.len() as u64;
    true
}

/// Computes and stores the UDP or TCP checksum of `frame` (Ethernet, optional VLAN tags,
/// IPv4 or IPv6 without extension headers), whatever its checksum field holds: the kernel
/// leaves only the pseudo-header sum there when the sender offloads checksumming
/// (`CHECKSUM_PARTIAL`, `TP_STATUS_CSUMNOTREADY`) and the device would have finished it. False
/// (frame unchanged) when the frame is not such a packet or is malformed.
fn complete_l4_checksum(frame: &mut [u8]) -> bool {
    use sb_wire::checksum;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let be16 = |b: &[u8], o: usize| u16::from_be_bytes([b[o], b[o + 1]]);
    if frame.len() < 14 {
        return false;
    }
    let mut off = 14;
    let mut ethertype = be16(frame, 12);
    while ethertype == 0x8100 || ethertype == 0x88a8 {
        if frame.len() < off + 4 {
            return false;
        }
        ethertype = be16(frame, off + 2);
        off += 4;
    }
    let (src, dst, proto, l4) = match ethertype {
        0x0800 => {
            if frame.len() < off + 20 || frame[off] >> 4 != 4 {
                return false;
            }
            let ihl = usize::from(frame[off] & 0x0f) * 4;
            let total = usize::from(be16(frame, off + 2));
            // Fragments never carry a partial checksum; refuse them rather than guess.
            if ihl < 20
                || total < ihl
                || frame.len() < off + total
                || be16(frame, off + 6) & 0x3fff != 0
            {
                return false;
            }
            let a = |o: usize| Ipv4Addr::new(frame[o], frame[o + 1], frame[o + 2], frame[o + 3]);
            (
                IpAddr::V4(a(off + 12)),
                IpAddr::V4(a(off + 16)),
                frame[off + 9],
                off + ihl..off + total,
            )
        }
        0x86dd => {
            if frame.len() < off + 40 || frame[off] >> 4 != 6 {
                return false;
            }
            let payload = usize::from(be16(frame, off + 4));
            if frame.len() < off + 40 + payload {
                return false;
            }
            let a = |o: usize| {
                let mut b = [0u8; 16];
                b.copy_from_slice(&frame[o..o + 16]);
                Ipv6Addr::from(b)
            };
            (
                IpAddr::V6(a(off + 8)),
                IpAddr::V6(a(off + 24)),
                frame[off + 6],
                off + 40..off + 40 + payload,
            )
        }
        _ => return false,
    };
    let seg = &mut frame[l4];
    return match proto {
        6 if seg.len() >= 20 => fill(seg, 16, src, dst, proto),
        17 if seg.len() >= 8 => {
            let udp_len = usize::from(be16(seg, 4));
            udp_len >= 8 && udp_len <= seg.len() && fill(&mut seg[..udp_len], 6, src, dst, proto)
        }
        _ => false,
    };

    fn fill(seg: &mut [u8], field: usize, src: IpAddr, dst: IpAddr, proto: u8) -> bool {
        seg[field..field + 2].fill(0);
        let Some(c) = checksum::upper_layer(src, dst, proto, seg) else {
            return false;
        };
        // UDP sends a computed zero as 0xffff (zero means "no checksum").
        let c = if proto == 17 && c == 0 { 0xffff } else { c };
        seg[field..field + 2].copy_from_slice(&c.to_be_bytes());
        true
    }
}

/// Appends `frame` to `batch`, putting back a VLAN tag the kernel moved into metadata.
#[inline]
fn push_frame(batch: &mut PacketBatch, frame: &[u8], status: u32, tci: u16, tpid: u16) -> bool {
    if status & libc::TP_STATUS_VLAN_VALID == 0 || frame.len() < 12 {
        return batch.push(frame);
    }
    let tpid = if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
        tpid
    } else {
        0x8100
    };
    match batch.alloc(frame.len() + 4) {
        Some(out) => {
            out[..12].copy_from_slice(&frame[..12]);
            out[12..14].copy_from_slice(&tpid.to_be_bytes());
            out[14..16].copy_from_slice(&tci.to_be_bytes());
            out[16..].copy_from_slice(&frame[12..]);
            true
        }
        None => false,
    }
}

/// poll(2) one fd; true if any requested event is ready.
fn poll_fd(fd: RawFd, events: libc::c_short, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: p is a valid pollfd array of length 1.
    let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    r > 0 && (p.revents & events) != 0
}

impl Port for AfPacketPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        let Some(ring) = &mut self.rx else { return 0 };
        if ring.frames {
            return self.rx_frames(batch);
        }
        let mut n = 0usize;
        while !batch.is_full() {
            if ring.remaining == 0 {
                let status = Self::block_status(ring, ring.cur);
                if status.load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                    break;
                }
                // SAFETY: the block is ours (status USER); its descriptor is at the block start.
                let (num, first) = unsafe {
                    let bd = ring.map.as_ptr().add(ring.cur * ring.block_size)
                        as *const libc::tpacket_block_desc;
                    (
                        (*bd).hdr.bh1.num_pkts,
                        (*bd).hdr.bh1.offset_to_first_pkt as usize,
                    )
                };
                if num == 0 || first >= ring.block_size {
                    status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
                    ring.cur = (ring.cur + 1) % ring.block_count;
                    continue;
                }
                ring.remaining = num;
                ring.offset = first;
            }
            let block = ring.cur * ring.block_size;
            // SAFETY: offset < block_size (checked when set); the frame header lies inside the
            // block the kernel handed us.
            let h = unsafe {
                std::ptr::read(
                    ring.map.as_ptr().add(block + ring.offset) as *const libc::tpacket3_hdr
                )
            };
            let mac = ring.offset + h.tp_mac as usize;
            let len = h.tp_snaplen as usize;
            let valid = mac + len <= ring.block_size
                && ring.offset + std::mem::size_of::<libc::tpacket3_hdr>() <= ring.block_size;
            if !valid {
                self.stats.rx_errors += 1;
                ring.remaining = 1; // abandon the rest of this block below
            } else {
                // SAFETY: [mac, mac + len) is inside the block (checked just above).
                let frame =
                    unsafe { std::slice::from_raw_parts(ring.map.as_ptr().add(block + mac), len) };
                let info = FrameInfo {
                    status: h.tp_status,
                    wire_len: h.tp_len,
                    vlan_tci: h.hv1.tp_vlan_tci as u16,
                    vlan_tpid: h.hv1.tp_vlan_tpid,
                };
                if take_frame(&mut self.stats, batch, frame, &info) {
                    n += 1;
                }
            }
            ring.remaining -= 1;
            if ring.remaining == 0 || h.tp_next_offset == 0 {
                ring.remaining = 0;
                Self::block_status(ring, ring.cur).store(libc::TP_STATUS_KERNEL, Ordering::Release);
                ring.cur = (ring.cur + 1) % ring.block_count;
            } else {
                ring.offset += h.tp_next_offset as usize;
                if ring.offset >= ring.block_size {
                    self.stats.rx_errors += 1;
                    ring.remaining = 0;
                    Self::block_status(ring, ring.cur)
                        .store(libc::TP_STATUS_KERNEL, Ordering::Release);
                    ring.cur = (ring.cur + 1) % ring.block_count;
                }
            }
        }
        self.stats.rx_packets += n as u64;
        n
    }

    fn tx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        if batch.is_empty() {
            return 0;
        }
        let sent = match self.tx {
            TxPath::Sendmmsg { .. } => self.tx_sendmmsg(batch),
            TxPath::Ring { .. } => self.tx_ring(batch),
        };
        self.stats.tx_packets += sent as u64;
        batch.clear();
        sent
    }

    fn wait_rx(&mut self, timeout: Duration) -> Result<bool, IoError> {
        let Some(ring) = &self.rx else {
            std::thread::sleep(timeout);
            return Ok(false);
        };
        let ready = if ring.frames {
            Self::frame_status(ring, ring.cur).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
        } else {
            ring.remaining > 0
                || Self::block_status(ring, ring.cur).load(Ordering::Acquire) & libc::TP_STATUS_USER
                    != 0
        };
        if ready {
            return Ok(true);
        }
        let fd = self.rx_fd.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1);
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        Ok(poll_fd(fd, libc::POLLIN, ms))
    }

    fn rx_fd(&self) -> Option<RawFd> {
        self.rx_fd.as_ref().map(|f| f.as_raw_fd())
    }

    fn stats(&self) -> PortStats {
        self.poll_kernel_stats();
        let mut s = self.stats;
        s.rx_dropped += self.kernel_drops.get();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sb_wire::{
        parse_frame_with, EthernetAddress, L4Header, PacketBuilder, ParseOptions, TcpFlags, VlanTag,
    };
    use std::net::IpAddr;

    fn verify(frame: &[u8]) -> bool {
        let opts = ParseOptions {
            verify_l4_checksum: true,
            ..ParseOptions::default()
        };
        parse_frame_with(frame, &opts).is_ok()
    }

    fn built(src: &str, dst: &str, tcp: bool, vlan: bool, payload_len: usize) -> Vec<u8> {
        let mut b = PacketBuilder::udp(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            src.parse::<IpAddr>().unwrap(),
            dst.parse::<IpAddr>().unwrap(),
            4000,
            5000,
        );
        if tcp {
            b.l4 = L4Header::Tcp {
                src_port: 4000,
                dst_port: 5000,
                seq_number: 7,
                ack_number: 9,
                flags: TcpFlags::ACK,
                window: 1000,
            };
        }
        if vlan {
            b.vlan = Some(VlanTag::from_tci(42));
        }
        let payload: Vec<u8> = (0..payload_len).map(|i| (i * 7) as u8).collect();
        let mut out = vec![0u8; 2000];
        let n = b.build(&payload, &mut out).unwrap();
        out.truncate(n);
        out
    }

    /// Where the L4 checksum field is in a frame from `built`.
    fn csum_at(src: &str, tcp: bool, vlan: bool) -> usize {
        let l3 = if vlan { 18 } else { 14 };
        let ip = if src.contains(':') { 40 } else { 20 };
        l3 + ip + if tcp { 16 } else { 6 }
    }

    #[test]
    fn partial_checksums_are_completed() {
        for (src, dst) in [("10.0.0.1", "10.0.0.2"), ("fd00::1", "fd00::2")] {
            for tcp in [false, true] {
                for vlan in [false, true] {
                    for len in [0, 1, 2, 33, 1000] {
                        let good = built(src, dst, tcp, vlan, len);
                        assert!(verify(&good));
                        let at = csum_at(src, tcp, vlan);
                        // What a CHECKSUM_PARTIAL skb holds: a pseudo-header sum, not the
                        // checksum; anything but the right value must be replaced.
                        for junk in [[0u8, 0], [0x12, 0x34], [0xff, 0xff]] {
                            let mut f = good.clone();
                            f[at..at + 2].copy_from_slice(&junk);
                            assert!(complete_l4_checksum(&mut f), "{src} tcp={tcp} len={len}");
                            assert!(verify(&f), "{src} tcp={tcp} vlan={vlan} len={len}");
                            assert_eq!(f, good);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn frames_that_cannot_be_completed_are_left_alone() {
        let good = built("10.0.0.1", "10.0.0.2", false, false, 10);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("runt", good[..13].to_vec()),
            ("arp", {
                let mut f = good.clone();
                f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
                f
            }),
            ("ip cut short", good[..30].to_vec()),
            ("fragment", {
                let mut f = good.clone();
                f[14 + 6] = 0x20; // more fragments
                f
            }),
            ("udp length beyond the packet", {
                let mut f = good.clone();
                f[14 + 20 + 4..14 + 20 + 6].copy_from_slice(&500u16.to_be_bytes());
                f
            }),
            ("icmp", {
                let mut f = good.clone();
                f[14 + 9] = 1;
                f
            }),
        ];
        for (what, f) in cases {
            let mut g = f.clone();
            assert!(!complete_l4_checksum(&mut g), "{what}");
            assert_eq!(g, f, "{what}: unchanged");
        }
    }

    #[test]
    fn truncated_and_partial_frames_are_counted() {
        let good = built("10.0.0.1", "10.0.0.2", true, false, 100);
        let mut stats = PortStats::default();
        let mut batch = PacketBatch::new(4);
        let info = |status, wire_len| FrameInfo {
            status,
            wire_len,
            vlan_tci: 0,
            vlan_tpid: 0,
        };
        let len = good.len() as u32;
        assert!(!take_frame(
            &mut stats,
            &mut batch,
            &good[..80],
            &info(libc::TP_STATUS_USER, len)
        ));
        assert_eq!((stats.rx_truncated, batch.len()), (1, 0));
        let mut partial = good.clone();
        partial[14 + 20 + 16] ^= 0x5a;
        let st = libc::TP_STATUS_USER | libc::TP_STATUS_CSUMNOTREADY;
        assert!(take_frame(&mut stats, &mut batch, &partial, &info(st, len)));
        assert_eq!(batch.get(0), &good[..]);
        assert_eq!(stats.rx_csum_completed, 1);
        // A partial frame that is not UDP/TCP is dropped, not passed on unverified.
        let mut arp = good.clone();
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert!(!take_frame(&mut stats, &mut batch, &arp, &info(st, len)));
        assert_eq!((stats.rx_errors, batch.len()), (1, 1));
        assert!(take_frame(
            &mut stats,
            &mut batch,
            &good,
            &info(libc::TP_STATUS_USER, len)
        ));
        assert_eq!(stats.rx_bytes, 2 * len as u64);
        assert_eq!(stats.rx_truncated, 1);
    }
}
