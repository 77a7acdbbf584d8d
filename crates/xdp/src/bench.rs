//! A traffic generator and a sink in XDP, for measuring the fast path through real veths
//! (`scalebricks-bench io --backend xdp-fast`).
//!
//! - The generator (`sb_gen` in `bpf/bench.bpf.c`) runs through `BPF_PROG_TEST_RUN` in
//!   live-frames mode, as xdp-trafficgen does: every run writes the next of the template
//!   frames over the packet and redirects it out of a veth, where the peer's XDP program (the
//!   fast path) receives it in its NAPI poll. The kernel recycles the pages of earlier runs as
//!   the receiver left them (an encapsulated frame stays encapsulated), so the program writes
//!   every byte again instead of relying on the kernel's initial copy. The runs execute on the
//!   calling thread's CPU, and the redirect resolves interface indexes in the calling thread's
//!   network namespace.
//! - The sink (`sb_sink`) counts frames and bytes per CPU and drops them. Attached natively to
//!   the far veth it also gives that veth the NAPI instance that native redirects into it need.
#![allow(unsafe_code)]

use crate::loader::{AttachMode, XdpError};
use aya::maps::{Array, MapData, PerCpuArray};
use aya::programs::{TestRun as _, TestRunAttrs, TestRunOptions, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/bench.bpf.o"));

/// Largest template frame (bytes): `GEN_FRAME_MAX` of `bpf/bench.bpf.c`.
pub const GEN_FRAME_MAX: usize = 128;

/// The generator and sink programs and their maps.
pub struct TrafficGen {
    ebpf: Ebpf,
    cfg: Array<MapData, [u32; 2]>,
    stats: PerCpuArray<MapData, u64>,
    frame_len: usize,
}

impl TrafficGen {
    /// Loads both programs with `frames` as the generator's templates (all of one length, at
    /// most [`GEN_FRAME_MAX`] bytes, at least 14); `ifindex` is the interface the generator
    /// sends out of (in the namespace of the thread that later calls [`TrafficGen::send`]).
    pub fn load(frames: &[Vec<u8>], ifindex: u32) -> Result<TrafficGen, XdpError> {
        let frame_len = frames.first().map_or(0, Vec::len);
        if frames.is_empty()
            || !(14..=GEN_FRAME_MAX).contains(&frame_len)
            || frames.iter().any(|f| f.len() != frame_len)
        {
            return Err(XdpError::Frames(format!(
                "{} frames of {frame_len} bytes (one length, 14 to {GEN_FRAME_MAX} bytes)",
                frames.len()
            )));
        }
        let n = u32::try_from(frames.len())
            .map_err(|_| XdpError::Frames(format!("{} frames", frames.len())))?;
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("sb_gen_frames", n)
            .load(OBJECT)?;
        for name in ["sb_gen", "sb_sink"] {
            let x: &mut Xdp = ebpf
                .program_mut(name)
                .ok_or(XdpError::Missing(name))?
                .try_into()?;
            x.load()?;
        }
        let mut take = |n: &'static str| ebpf.take_map(n).ok_or(XdpError::Missing(n));
        let mut tpl: Array<MapData, [u8; GEN_FRAME_MAX]> = Array::try_from(take("sb_gen_frames")?)?;
        let mut cfg: Array<MapData, [u32; 2]> = Array::try_from(take("sb_gen_cfg")?)?;
        let stats = PerCpuArray::try_from(take("sb_bench_stats")?)?;
        for (i, f) in frames.iter().enumerate() {
            let mut b = [0u8; GEN_FRAME_MAX];
            b[..f.len()].copy_from_slice(f);
            tpl.set(i as u32, b, 0)?;
        }
        cfg.set(0, [n, ifindex], 0)?;
        Ok(TrafficGen {
            ebpf,
            cfg,
            stats,
            frame_len,
        })
    }

    /// Changes the interface the generator sends out of.
    pub fn set_target(&mut self, ifindex: u32) -> Result<(), XdpError> {
        let [n, _] = self.cfg.get(&0, 0)?;
        Ok(self.cfg.set(0, [n, ifindex], 0)?)
    }

    /// Sends `count` frames (the templates in turn, continuing where the last call stopped on
    /// this CPU) out of the target interface, in kernel batches of `batch` (at most 256). Runs
    /// on the calling thread until done; frames the target cannot take are dropped by the
    /// kernel (counted nowhere here: compare with the sink).
    pub fn send(&self, count: u32, batch: u32) -> Result<std::time::Duration, XdpError> {
        let x: &Xdp = self
            .ebpf
            .program("sb_gen")
            .ok_or(XdpError::Missing("sb_gen"))?
            .try_into()?;
        let data = vec![0u8; self.frame_len];
        let mut opts = TestRunOptions::new();
        opts.data_in = Some(&data);
        opts.repeat = count.max(1);
        opts.attrs = TestRunAttrs::new().xdp_live_frames(batch.clamp(1, 256));
        Ok(x.test_run(opts)?.duration)
    }

    /// Attaches the sink to interface `ifindex` of the calling thread's network namespace;
    /// the attachment lasts as long as this value.
    pub fn attach_sink(&mut self, ifindex: u32, mode: AttachMode) -> Result<(), XdpError> {
        let x: &mut Xdp = self
            .ebpf
            .program_mut("sb_sink")
            .ok_or(XdpError::Missing("sb_sink"))?
            .try_into()?;
        let m = match mode {
            AttachMode::Native => XdpMode::Driver,
            AttachMode::Generic => XdpMode::Skb,
        };
        x.attach_to_if_index(ifindex, m)?;
        Ok(())
    }

    /// Frames and bytes the sink has seen, summed over CPUs.
    pub fn sink_counts(&self) -> Result<(u64, u64), XdpError> {
        let n: u64 = self.stats.get(&1, 0)?.iter().sum();
        let b: u64 = self.stats.get(&2, 0)?.iter().sum();
        Ok((n, b))
    }
}
