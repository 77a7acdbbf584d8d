//! Loading the fast path with aya, filling and updating its maps, attaching its programs, and
//! running them on test frames (`BPF_PROG_TEST_RUN`).
#![allow(unsafe_code)]

use crate::layout::{
    Arch, BlockEdit, Counter, GptImage, LayoutError, NodeSetup, BLOCK_BYTES, CFG_BYTES, GROUPS_AT,
    NODE_BYTES,
};
use aya::maps::{Array, HashMap, MapData, PerCpuArray, XskMap};
use aya::programs::{TestRun as _, TestRunOptions, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use sb_common::Mmap;
use sb_setsep::Delta;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{fence, AtomicU32, Ordering};

/// The compiled object (build.rs).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/fastpath.bpf.o"));

/// Why the fast path could not be loaded, filled or attached.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// Loading the object or a program (the verifier's log is in the message).
    #[error("loading the BPF object: {0}")]
    Load(#[from] aya::EbpfError),
    /// A program operation (load, attach, test run).
    #[error("BPF program: {0}")]
    Program(#[from] aya::programs::ProgramError),
    /// A map operation.
    #[error("BPF map: {0}")]
    Map(#[from] aya::maps::MapError),
    /// The tables or the setup do not fit the maps.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// mmap of the GPT map failed.
    #[error("mmap of the GPT map: {0}")]
    Mmap(std::io::Error),
    /// A map or program the object should have is missing.
    #[error("the BPF object has no {0}")]
    Missing(&'static str),
    /// Generator templates that do not fit (see `bench::TrafficGen::load`).
    #[error("traffic generator templates: {0}")]
    Frames(String),
    /// A GPT of another block count than the map was made for.
    #[error("GPT of {got} blocks, the map holds {have}")]
    Blocks {
        /// Blocks of the table given.
        got: u64,
        /// Blocks of the map.
        have: u64,
    },
    /// A slow-path socket for a port or queue the programs have no entry for.
    #[error("slow path: {0}")]
    SlowPath(String),
}

/// Receive queues per port the slow path has XSKMAP entries for (`XSK_QUEUES` of
/// bpf/fastpath.bpf.c).
pub const XSK_QUEUES: u32 = 64;

/// Whether this process may load BPF programs (root); `Err` says why not, for tests that skip.
pub fn root_and_bpf() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root: BPF programs cannot be loaded".into());
    }
    Ok(())
}

/// The programs of the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prog {
    /// Downlink at `inet`.
    Inet,
    /// Uplink at `ran`.
    Ran,
    /// Frames from the other nodes at `fabric`.
    Fabric,
    /// Test program: replaces each 16-byte key of the frame by its hash.
    TestHash,
    /// Test program: writes each 16-byte key's GPT answer into its first two bytes.
    TestGpt,
}

impl Prog {
    fn name(self) -> &'static str {
        match self {
            Prog::Inet => "sb_inet",
            Prog::Ran => "sb_ran",
            Prog::Fabric => "sb_fabric",
            Prog::TestHash => "sb_test_hash",
            Prog::TestGpt => "sb_test_gpt",
        }
    }
    const ALL: [Prog; 5] = [
        Prog::Inet,
        Prog::Ran,
        Prog::Fabric,
        Prog::TestHash,
        Prog::TestGpt,
    ];
}

/// Where a program is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// Native (driver) mode.
    Native,
    /// Generic (SKB) mode.
    Generic,
}

/// One test run's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestRun {
    /// The XDP action (`XDP_PASS` 2, `XDP_REDIRECT` 4, ...).
    pub action: u32,
    /// The frame after the program.
    pub frame: Vec<u8>,
}

/// XDP actions.
pub mod action {
    /// `XDP_ABORTED`.
    pub const ABORTED: u32 = 0;
    /// `XDP_DROP`.
    pub const DROP: u32 = 1;
    /// `XDP_PASS`.
    pub const PASS: u32 = 2;
    /// `XDP_TX`.
    pub const TX: u32 = 3;
    /// `XDP_REDIRECT`.
    pub const REDIRECT: u32 = 4;
}

/// The mmap of the GPT array map.
struct GptMap {
    /// Plain shared memory owned by this value; byte writes happen only under `writer` (one
    /// writer at a time) and the version words are accessed atomically.
    map: Mmap,
    blocks: u64,
    /// Held by every block write: one writer at a time.
    writer: std::sync::Mutex<()>,
}

impl GptMap {
    fn new(map: &MapData, blocks: u64) -> Result<GptMap, XdpError> {
        let len = (blocks as usize * BLOCK_BYTES).div_ceil(4096) * 4096;
        let fd = map.fd().as_fd().as_raw_fd();
        // A shared read/write mapping of an mmap'able BPF array of `blocks` elements of
        // BLOCK_BYTES (a multiple of 8, so no padding between elements); the kernel refuses a
        // length past the map.
        let map = Mmap::shared(fd, len, 0, false).map_err(XdpError::Mmap)?;
        Ok(GptMap {
            map,
            blocks,
            writer: std::sync::Mutex::new(()),
        })
    }

    fn version(&self, blk: u64) -> &AtomicU32 {
        assert!(blk < self.blocks);
        // SAFETY: in bounds (checked), 8-aligned (page-aligned base, BLOCK_BYTES a multiple
        // of 8); the word is only accessed atomically from user space.
        unsafe { &*(self.map.as_ptr().add(blk as usize * BLOCK_BYTES) as *const AtomicU32) }
    }

    /// Writes `bytes` at `off` of block `blk`'s element (past the version word). The caller
    /// holds `writer` and has made the block odd.
    fn write(&self, blk: u64, off: usize, bytes: &[u8]) {
        assert!(blk < self.blocks && off >= 8 && off + bytes.len() <= BLOCK_BYTES);
        // SAFETY: in bounds (checked); the BPF reader may read these bytes concurrently,
        // which the version word makes it discard (see the crate docs).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.map.as_ptr().add(blk as usize * BLOCK_BYTES + off),
                bytes.len(),
            )
        }
    }

    /// Starts a write of block `blk`: its version becomes odd.
    fn begin(&self, blk: u64) -> u32 {
        let v = self.version(blk);
        let old = v.load(Ordering::Relaxed);
        v.store(old | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        old | 1
    }

    /// Ends a write: the version becomes even (and new).
    fn end(&self, blk: u64, odd: u32) {
        fence(Ordering::Release);
        self.version(blk)
            .store(odd.wrapping_add(1), Ordering::Release);
    }
}

/// The loaded fast path of one node: its programs and maps, and the writer of its tables.
pub struct FastPath {
    ebpf: Ebpf,
    cfg: Array<MapData, [u8; CFG_BYTES]>,
    nodes: Array<MapData, [u8; NODE_BYTES]>,
    fallback: HashMap<MapData, [u8; 16], u32>,
    fib: HashMap<MapData, [u8; 16], [u8; 32]>,
    uplink: HashMap<MapData, [u8; 4], [u8; 24]>,
    xsks: XskMap<MapData>,
    stats: PerCpuArray<MapData, u64>,
    gpt_map: GptMap,
    gpt: GptImage,
    setup: NodeSetup,
    arch: Arch,
    /// Whether `sb_cfg` says ready ([`FastPath::set_enabled`]).
    enabled: bool,
}

/// Whether a map deletion failed only because the key was not there: aya reports that as the
/// syscall's ENOENT (`bpf_map_delete_elem`), not as `KeyNotFound`, which is its lookups'.
fn absent(e: &aya::maps::MapError) -> bool {
    match e {
        aya::maps::MapError::KeyNotFound => true,
        aya::maps::MapError::SyscallError(s) => s.io_error.raw_os_error() == Some(libc::ENOENT),
        _ => false,
    }
}

impl FastPath {
    /// Loads the object (every program through the verifier), sizes the maps for `gpt` (its
    /// fallback map for twice its fallback entries, at least 65536),
    /// `fib_capacity` FIB and `uplink_capacity` uplink entries, and fills the configuration
    /// and the GPT (FIB and uplink entries are inserted by the caller). Nothing is attached.
    /// The ScaleBricks architecture ([`FastPath::load_arch`] for the others).
    pub fn load(
        setup: NodeSetup,
        gpt: GptImage,
        fib_capacity: u32,
        uplink_capacity: u32,
    ) -> Result<FastPath, XdpError> {
        FastPath::load_arch(Arch::ScaleBricks, setup, gpt, fib_capacity, uplink_capacity)
    }

    /// [`FastPath::load`] for architecture `arch`: the programs follow it (`sb_cfg`), and the
    /// caller fills `sb_fib` with what the node's FIB holds under it (ScaleBricks: its slice;
    /// full duplication: every entry; hash partitioning: the entries whose key hashes to it).
    /// Without a GPT (full duplication, hash partitioning) `gpt` is
    /// [`GptImage::none`]`(seed)`, `seed` the key-hash seed of the node's FIB.
    pub fn load_arch(
        arch: Arch,
        setup: NodeSetup,
        gpt: GptImage,
        fib_capacity: u32,
        uplink_capacity: u32,
    ) -> Result<FastPath, XdpError> {
        setup.check()?;
        let blocks = gpt.n_blocks;
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("sb_gpt", blocks as u32)
            .map_max_entries("sb_fib", fib_capacity.max(1))
            .map_max_entries("sb_uplink", uplink_capacity.max(1))
            .map_max_entries(
                "sb_gpt_fb",
                (gpt.fallback.len() as u32).saturating_mul(2).max(65536),
            )
            .load(OBJECT)?;
        for p in Prog::ALL {
            let x: &mut Xdp = ebpf
                .program_mut(p.name())
                .ok_or(XdpError::Missing(p.name()))?
                .try_into()?;
            x.load()?;
        }
        let mut take = |n: &'static str| ebpf.take_map(n).ok_or(XdpError::Missing(n));
        let cfg = Array::try_from(take("sb_cfg")?)?;
        let nodes = Array::try_from(take("sb_nodes")?)?;
        let fallback = HashMap::try_from(take("sb_gpt_fb")?)?;
        let fib = HashMap::try_from(take("sb_fib")?)?;
        let uplink = HashMap::try_from(take("sb_uplink")?)?;
        let xsks = XskMap::try_from(take("sb_xsks")?)?;
        let stats = PerCpuArray::try_from(take("sb_stats")?)?;
        let gpt_data = match take("sb_gpt")? {
            aya::maps::Map::Array(d) => d,
            _ => return Err(XdpError::Missing("sb_gpt as an array")),
        };
        let gpt_map = GptMap::new(&gpt_data, blocks)?;
        // The mapping keeps the map alive; the MapData (its fd) may go.
        drop(gpt_data);
        let mut fp = FastPath {
            ebpf,
            cfg,
            nodes,
            fallback,
            fib,
            uplink,
            xsks,
            stats,
            gpt_map,
            gpt: gpt.clone(),
            setup,
            arch,
            enabled: true,
        };
        fp.load_gpt(gpt)?;
        for n in 0..fp.setup.fabric_macs.len() {
            let b = fp.setup.node_bytes(n);
            fp.nodes.set(n as u32, b, 0)?;
        }
        let c = fp.setup.cfg_bytes(fp.arch, &fp.gpt, fp.enabled);
        fp.cfg.set(0, c, 0)?;
        Ok(fp)
    }

    /// Sets the stand-ins: `by[n]` stands in for node `n` (None, or past the end: none), as
    /// `sb_control`'s `Event::StandIns` names them; the program's GPT answers naming `n` go to
    /// `by[n]`. A stand-in outside the cluster is refused.
    pub fn set_stand_ins(&mut self, by: &[Option<u16>]) -> Result<(), XdpError> {
        let nodes = self.setup.fabric_macs.len();
        if let Some(&s) = by.iter().flatten().find(|&&s| usize::from(s) >= nodes) {
            return Err(crate::layout::LayoutError::Nodes { node: s, nodes }.into());
        }
        for n in 0..nodes {
            let b = self.setup.node_bytes_with(n, by.get(n).copied().flatten());
            self.nodes.set(n as u32, b, 0)?;
        }
        Ok(())
    }

    /// Replaces the whole GPT (same block count) block by block, each under its version
    /// word; fallback entries of the old table that the new one lacks are removed.
    pub fn load_gpt(&mut self, gpt: GptImage) -> Result<(), XdpError> {
        if gpt.n_blocks != self.gpt_map.blocks {
            return Err(XdpError::Blocks {
                got: gpt.n_blocks,
                have: self.gpt_map.blocks,
            });
        }
        for blk in 0..gpt.n_blocks {
            self.write_block(&gpt, blk)?;
        }
        for &(lo, hi, _) in &self.gpt.fallback {
            if !gpt.fallback.iter().any(|&(l, h, _)| (l, h) == (lo, hi)) {
                match self.fallback.remove(&fb_key(lo, hi)) {
                    Ok(()) | Err(aya::maps::MapError::KeyNotFound) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        for &(lo, hi, v) in &gpt.fallback {
            self.fallback.insert(fb_key(lo, hi), u32::from(v), 0)?;
        }
        // A new seed or shape: the configuration follows.
        let c = self.setup.cfg_bytes(self.arch, &gpt, self.enabled);
        self.gpt = gpt;
        self.cfg.set(0, c, 0)?;
        Ok(())
    }

    /// Applies a GPT delta that the node's live GPT accepted: the block it touches is taken
    /// odd, written (choices, records, fallback edits), and taken even, so the program
    /// never answers from half of it.
    pub fn apply_gpt_delta(&mut self, d: &Delta) -> Result<(), XdpError> {
        let e = BlockEdit::of(d, &self.gpt)?;
        self.apply_edit(&e)
    }

    /// [`FastPath::apply_gpt_delta`] for an edit already read.
    pub fn apply_edit(&mut self, e: &BlockEdit) -> Result<(), XdpError> {
        let _w = self
            .gpt_map
            .writer
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let v = self.gpt_map.begin(e.block);
        let r = (|| -> Result<(), XdpError> {
            if let Some(c) = &e.choices {
                self.gpt_map.write(e.block, 8, c);
            }
            self.gpt_map
                .write(e.block, GROUPS_AT + e.records_at, &e.records);
            for &(lo, hi) in &e.fb_remove {
                match self.fallback.remove(&fb_key(lo, hi)) {
                    Ok(()) | Err(aya::maps::MapError::KeyNotFound) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            for &(lo, hi, val) in &e.fb_insert {
                self.fallback.insert(fb_key(lo, hi), u32::from(val), 0)?;
            }
            Ok(())
        })();
        self.gpt_map.end(e.block, v);
        drop(_w);
        e.apply_to(&mut self.gpt);
        r
    }

    /// Writes block `blk` of `gpt` (a piece's block, or one block of a rebuilt table with the
    /// same shape and the same fallback entries for that block) under its version word. Takes
    /// `&self`: lookups (and test runs) may go on in other threads meanwhile.
    pub fn write_block(&self, gpt: &GptImage, blk: u64) -> Result<(), XdpError> {
        if blk >= self.gpt_map.blocks || gpt.n_blocks != self.gpt_map.blocks {
            return Err(XdpError::Blocks {
                got: gpt.n_blocks,
                have: self.gpt_map.blocks,
            });
        }
        let e = gpt.block(blk);
        let _w = self
            .gpt_map
            .writer
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let v = self.gpt_map.begin(blk);
        self.gpt_map.write(blk, 8, &e[8..]);
        self.gpt_map.end(blk, v);
        Ok(())
    }

    /// The architecture the programs run.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The GPT the maps hold.
    pub fn gpt(&self) -> &GptImage {
        &self.gpt
    }

    /// Installs (or replaces) a FIB entry: one hash-map update, atomic for the program.
    pub fn fib_insert(&mut self, key: &[u8; 16], value: &[u8; 32]) -> Result<(), XdpError> {
        Ok(self.fib.insert(key, value, 0)?)
    }

    /// Removes a FIB entry (absent: nothing to do).
    pub fn fib_remove(&mut self, key: &[u8; 16]) -> Result<(), XdpError> {
        match self.fib.remove(key) {
            Err(e) if !absent(&e) => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Installs (or replaces) an uplink entry (key: the uplink TEID, big endian).
    pub fn uplink_insert(&mut self, teid: &[u8; 4], value: &[u8; 24]) -> Result<(), XdpError> {
        Ok(self.uplink.insert(teid, value, 0)?)
    }

    /// Removes an uplink entry (absent: nothing to do).
    pub fn uplink_remove(&mut self, teid: &[u8; 4]) -> Result<(), XdpError> {
        match self.uplink.remove(teid) {
            Err(e) if !absent(&e) => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Makes the AF_XDP socket `socket` (bound to `port`'s interface, queue `queue`: the kernel
    /// hands a socket only frames of its own interface and queue) the slow path of the frames
    /// `port`'s program receives on that queue and does not finish. Frames of more than 3,072
    /// bytes, and every frame of a queue with no socket, go up the kernel's path instead
    /// (`XDP_PASS`). Queues 0..64.
    pub fn set_slow_path_socket(
        &mut self,
        port: Prog,
        queue: u32,
        socket: std::os::fd::RawFd,
    ) -> Result<(), XdpError> {
        let base = match port {
            Prog::Inet => 0,
            Prog::Ran => 1,
            Prog::Fabric => 2,
            Prog::TestHash | Prog::TestGpt => {
                return Err(XdpError::SlowPath(format!("{port:?} has no slow path")))
            }
        };
        if queue >= XSK_QUEUES {
            return Err(XdpError::SlowPath(format!(
                "queue {queue}: the slow path takes queues 0..{XSK_QUEUES}"
            )));
        }
        Ok(self.xsks.set(base * XSK_QUEUES + queue, socket, 0)?)
    }

    /// Changes the interface indexes the programs redirect to (after the ports exist).
    pub fn set_ifindexes(&mut self, inet: u32, ran: u32, fabric: u32) -> Result<(), XdpError> {
        self.setup.ifindex_inet = inet;
        self.setup.ifindex_ran = ran;
        self.setup.ifindex_fabric = fabric;
        let c = self.setup.cfg_bytes(self.arch, &self.gpt, self.enabled);
        Ok(self.cfg.set(0, c, 0)?)
    }

    /// Turns the fast path on or off: off, the programs send every frame to the slow path
    /// (`sb_cfg`'s ready flag clear, counted as `slow_other`), as before the tables were
    /// loaded. A node turns it off when a table write fails, so that the maps, no longer in
    /// step with its tables, answer nothing.
    pub fn set_enabled(&mut self, on: bool) -> Result<(), XdpError> {
        self.enabled = on;
        let c = self.setup.cfg_bytes(self.arch, &self.gpt, on);
        Ok(self.cfg.set(0, c, 0)?)
    }

    /// Whether the fast path is on ([`FastPath::set_enabled`]).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Attaches `prog` to interface `ifindex` (of the calling thread's network namespace).
    /// The attachment lasts as long as this value.
    pub fn attach(&mut self, prog: Prog, ifindex: u32, mode: AttachMode) -> Result<(), XdpError> {
        let x: &mut Xdp = self
            .ebpf
            .program_mut(prog.name())
            .ok_or(XdpError::Missing(prog.name()))?
            .try_into()?;
        let m = match mode {
            AttachMode::Native => XdpMode::Driver,
            AttachMode::Generic => XdpMode::Skb,
        };
        x.attach_to_if_index(ifindex, m)?;
        Ok(())
    }

    /// Runs `prog` once on `frame` (`BPF_PROG_TEST_RUN`): its action and the frame after it.
    /// Redirects are not carried out; the counters say where a frame would have gone.
    pub fn test_run(&self, prog: Prog, frame: &[u8]) -> Result<TestRun, XdpError> {
        Ok(self.test_run_repeat(prog, frame, 1)?.0)
    }

    /// [`FastPath::test_run`] `repeat` times in the kernel; also the kernel's mean time per
    /// run. Each run sees the frame as the run before left it (a program that rewrites the
    /// frame measures its second pass from the second run on).
    pub fn test_run_repeat(
        &self,
        prog: Prog,
        frame: &[u8],
        repeat: u32,
    ) -> Result<(TestRun, std::time::Duration), XdpError> {
        let x: &Xdp = self
            .ebpf
            .program(prog.name())
            .ok_or(XdpError::Missing(prog.name()))?
            .try_into()?;
        let mut out = vec![0u8; frame.len() + 256];
        let mut opts = TestRunOptions::new();
        opts.data_in = Some(frame);
        opts.data_out = Some(&mut out);
        opts.repeat = repeat.max(1);
        let r = x.test_run(opts)?;
        out.truncate(r.data_size_out as usize);
        Ok((
            TestRun {
                action: r.return_value,
                frame: out,
            },
            r.duration,
        ))
    }

    /// The counters, summed over CPUs, in [`Counter::ALL`] order.
    pub fn counters(&self) -> Result<[u64; Counter::COUNT], XdpError> {
        let mut c = [0u64; Counter::COUNT];
        for (i, x) in c.iter_mut().enumerate() {
            *x = self.stats.get(&(i as u32), 0)?.iter().sum();
        }
        Ok(c)
    }
}

fn fb_key(lo: u64, hi: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&lo.to_le_bytes());
    k[8..].copy_from_slice(&hi.to_le_bytes());
    k
}
