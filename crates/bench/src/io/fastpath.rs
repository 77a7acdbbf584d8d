//! `bench io --engine --backend xdp-fast`: the sb-xdp fast path (`sb_inet`) between the veths.
//!
//! ```text
//!  [gen ns] g0 ==veth== a [fwd ns] b ==veth== s0 [sink ns]
//!  sb_gen (live frames)  sb_inet (XDP) -> redirect   sb_sink (XDP: count, drop)
//! ```
//! The generator is an XDP program run through `BPF_PROG_TEST_RUN` in live-frames mode on the
//! generator's CPU: it writes the same frames as the AF_PACKET generator (the engine tables'
//! UEs) and redirects them out of `g0`. `a` runs `sb_inet` in native mode (the FastPath loaded
//! with the one-node tables the engine rows use: the same SetSep GPT, every tunnel in the FIB
//! map); it encapsulates and redirects to `b`, whose peer `s0` runs the counting sink (a native
//! redirect into a veth needs an XDP program on its peer). `sb_ran` is attached to `b` too, as a
//! node has it. With `--xdp-mode generic`, or when native attachment fails, every program is
//! attached in generic (SKB) mode and GRO is turned on for `a` and `s0` (a veth takes XDP frames
//! only with a NAPI instance); the row says which mode ran.
//!
//! `--direction uplink` swaps the roles of the veths in the fast path's configuration: `a` is
//! the node's `ran` port running `sb_ran` (the generator sends the tunnels' G-PDUs, which it
//! decapsulates and redirects to `b`), `b` its `inet` port running `sb_inet`. The maps hold
//! the same tables both ways: the GPT, every tunnel in the FIB map and in the uplink map.
//!
//! CPU accounting: `a` and `s0` use threaded NAPI (`/sys/class/net/*/threaded`), so `sb_inet`
//! runs in the kernel thread `napi/a-N`, pinned to the forwarding CPU, and the sink in
//! `napi/s0-N`, pinned with the generator to the other CPU. Per core = frames the sink received
//! / (run time of `napi/a-N` + run time of the forwarding CPU's `ksoftirqd`), both from
//! `/proc/PID/schedstat` over the measured interval. The generator's own work (writing the
//! frames, the veth transmit into `a`'s ring) is on the other CPU and not charged, as the
//! AF_PACKET rows do not charge their generator. The forwarding CPU's whole busy time from
//! `/proc/stat` (every task on it, other users of a shared machine included) is reported beside
//! it (`fwd_cpu_busy_s`).

use super::{
    frame_sizes, pick_cpus, Args, Backend, Direction, EngineTables, FastPathRow, Row, XdpModeArg,
    GEN_MAC, SINK_MAC,
};
use anyhow::{bail, Context, Result};
use sb_engine::cluster;
use sb_engine::PortId;
use sb_io::afpacket;
use sb_io::cpu;
use sb_io::netns::{self, Netns};
use sb_xdp::bench::TrafficGen;
use sb_xdp::{AttachMode, Counter, FastPath, GptImage, NodeSetup, Prog};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The kernel threads named `napi/<dev>-N` now.
fn napi_threads(dev: &str) -> Vec<i32> {
    let prefix = format!("napi/{dev}-");
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            if let Ok(c) = std::fs::read_to_string(format!("/proc/{pid}/comm")) {
                if c.trim_end().starts_with(&prefix) {
                    v.push(pid);
                }
            }
        }
    }
    v
}

/// Turns threaded NAPI on for `dev` in `ns` and pins its new thread to `cpu_id`; its pid.
fn threaded_napi(ns: &Netns, dev: &str, cpu_id: usize) -> Result<i32> {
    let before = napi_threads(dev);
    // `ip netns exec` mounts the namespace's sysfs, where `dev` is.
    netns::run(
        "ip",
        &[
            "netns",
            "exec",
            ns.name(),
            "sh",
            "-c",
            &format!("echo 1 > /sys/class/net/{dev}/threaded"),
        ],
    )
    .with_context(|| format!("threaded NAPI on {dev}"))?;
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let new: Vec<i32> = napi_threads(dev)
            .into_iter()
            .filter(|p| !before.contains(p))
            .collect();
        if let [pid] = new[..] {
            netns::run(
                "taskset",
                &["-p", "-c", &cpu_id.to_string(), &pid.to_string()],
            )
            .with_context(|| format!("pinning napi/{dev} ({pid}) to CPU {cpu_id}"))?;
            return Ok(pid);
        }
        if Instant::now() > deadline {
            bail!(
                "no single new NAPI thread for {dev} after turning threaded NAPI on (new: {new:?})"
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn ifindex(ns: &Netns, dev: &str) -> Result<u32> {
    Ok(ns.run(|| afpacket::ifindex(dev))?? as u32)
}

/// The one-node FastPath with the bench's tables: downlink `sb_inet` on `a` and `sb_ran` on
/// `b`, uplink the other way round.
fn load_fastpath(
    lab: &super::Lab,
    tables: &EngineTables,
    dir: Direction,
    mode: AttachMode,
) -> Result<(FastPath, u32, u32)> {
    let a = ifindex(&lab.fwd, "a")?;
    let b = ifindex(&lab.fwd, "b")?;
    let a_mac = lab.fwd.run(|| afpacket::mac_address("a"))??;
    let b_mac = lab.fwd.run(|| afpacket::mac_address("b"))??;
    // (ifindex, MAC, peer MAC) of the node's inet and ran ports.
    let ((inet, inet_mac, inet_peer), (ran, ran_mac, ran_peer)) = match dir {
        Direction::Downlink => ((a, a_mac, GEN_MAC), (b, b_mac, SINK_MAC)),
        Direction::Uplink => ((b, b_mac, SINK_MAC), (a, a_mac, GEN_MAC)),
    };
    let setup = NodeSetup {
        node: 0,
        fabric_macs: vec![cluster::sim_mac(PortId::Fabric, 0, false)],
        ran_addrs: vec![cluster::sim_ran_addr(0)],
        ran_mtu: 1500,
        inet_mac,
        inet_peer,
        ran_mac,
        ran_peer,
        ifindex_inet: inet,
        ifindex_ran: ran,
        // One node: nothing goes to a fabric (counted as to_fabric if it did).
        ifindex_fabric: b,
    };
    let n = tables.tunnels.len() as u32;
    let mut fp = FastPath::load(setup, GptImage::of(&tables.setsep)?, n, n)
        .context("loading the fast path")?;
    for t in &tables.tunnels {
        fp.fib_insert(&t.key(), &t.value())?;
        let (k, v) = t.uplink_entry();
        fp.uplink_insert(&k, &v)?;
    }
    lab.fwd.run(|| -> Result<()> {
        fp.attach(Prog::Inet, inet, mode)?;
        fp.attach(Prog::Ran, ran, mode)?;
        Ok(())
    })??;
    Ok((fp, a, b))
}

/// Frames per generator call (about half a second at 2-4 Mpps).
const GEN_CALL: u32 = 1 << 21;

fn busy_ticks(cpu_id: usize) -> u64 {
    cpu::cpu_times(cpu_id).map_or(0, |t| t.busy())
}

/// One `xdp-fast` row in direction `dir` at frame size `size`.
pub(super) fn run_row(
    lab: &super::Lab,
    tables: &EngineTables,
    dir: Direction,
    size: usize,
    args: &Args,
) -> Result<Row> {
    let (fwd_cpu, side_cpu) = pick_cpus(args);
    let (frame_bytes, out_frame_bytes) = frame_sizes(size, Some(dir));
    if frame_bytes > sb_xdp::bench::GEN_FRAME_MAX {
        bail!(
            "the XDP generator sends frames of at most {} bytes (--size {size} asks {frame_bytes})",
            sb_xdp::bench::GEN_FRAME_MAX
        );
    }
    let dst_mac = lab.fwd.run(|| afpacket::mac_address("a"))??;
    let templates = tables.frames(dir, dst_mac, frame_bytes);

    // Native first (unless generic is asked for); generic when native attachment fails.
    let mut native_error = None;
    let (fp, mode) = match args.xdp_mode {
        XdpModeArg::Generic => (None, AttachMode::Generic),
        XdpModeArg::Native => match load_fastpath(lab, tables, dir, AttachMode::Native) {
            Ok(x) => (Some(x), AttachMode::Native),
            Err(e) => {
                eprintln!("native XDP on veth failed ({e:#}): generic mode");
                native_error = Some(format!("{e:#}"));
                (None, AttachMode::Generic)
            }
        },
    };
    let (fp, _a, _b) = match fp {
        Some(x) => x,
        None => load_fastpath(lab, tables, dir, AttachMode::Generic)?,
    };
    if mode == AttachMode::Generic {
        for (ns, dev) in [(&lab.fwd, "a"), (&lab.sink, "s0")] {
            ns.run(|| -> Result<()> {
                let mut o = netns::offloads(dev)?;
                o.gro = true;
                Ok(netns::set_offloads(dev, &o)?)
            })??;
        }
    }
    let g0 = ifindex(&lab.gen, "g0")?;
    let s0 = ifindex(&lab.sink, "s0")?;
    let mut tg = TrafficGen::load(&templates, g0).context("loading the XDP generator")?;
    lab.sink
        .run(|| tg.attach_sink(s0, mode))?
        .context("attaching the sink to s0")?;
    let napi_a = threaded_napi(&lab.fwd, "a", fwd_cpu)?;
    let napi_s0 = threaded_napi(&lab.sink, "s0", side_cpu)?;
    // The sink shares its CPU with the generator, which would take all of it: real-time
    // priority lets the sink drain `s0` first, so what `sb_inet` sends is received.
    netns::run("chrt", &["-f", "-p", "10", &napi_s0.to_string()])
        .context("real-time priority for the sink's NAPI thread")?;
    let ksoft = cpu::ksoftirqd_pid(fwd_cpu);

    let stop = AtomicBool::new(false);
    let runs = AtomicU64::new(0);
    let gen_ns = lab.gen.name().to_string();
    let warmup = Duration::from_millis(500);
    let measure = Duration::from_secs_f64(args.seconds.max(0.1));
    let counters = |fp: &FastPath| fp.counters().context("reading the fast path's counters");
    let c_start = counters(&fp)?;
    type Snap = (Instant, u64, u64, u64, u64, u64, [u64; Counter::COUNT]);
    let snap = |fp: &FastPath, tg: &TrafficGen| -> Result<Snap> {
        let (frames, bytes) = tg.sink_counts()?;
        Ok((
            Instant::now(),
            frames,
            bytes,
            cpu::pid_runtime_ns(napi_a).unwrap_or(0),
            ksoft.and_then(cpu::pid_runtime_ns).unwrap_or(0),
            busy_ticks(fwd_cpu),
            fp.counters()?,
        ))
    };
    let (s0s, s1s, gen_res) = std::thread::scope(|sc| {
        let gen = sc.spawn(|| -> Result<()> {
            let _ = cpu::pin_current_thread(side_cpu);
            netns::in_netns(&gen_ns, || -> Result<()> {
                // Long calls: each one sets a page pool up and tears it down, with waits
                // between calls that left the CPU idle at 2^16 frames per call.
                while !stop.load(Ordering::Relaxed) {
                    tg.send(GEN_CALL, 64)?;
                    runs.fetch_add(GEN_CALL.into(), Ordering::Relaxed);
                }
                Ok(())
            })?
        });
        let r = (|| -> Result<(Snap, Snap)> {
            std::thread::sleep(warmup);
            let a = snap(&fp, &tg)?;
            std::thread::sleep(measure);
            let b = snap(&fp, &tg)?;
            Ok((a, b))
        })();
        stop.store(true, Ordering::Relaxed);
        let g = gen
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("generator panicked")));
        match r {
            Ok((a, b)) => (Some(a), Some(b), g),
            Err(e) => (None, None, Err(e)),
        }
    });
    gen_res.context("the XDP generator")?;
    let (Some(s0s), Some(s1s)) = (s0s, s1s) else {
        unreachable!("snapshots exist when no error")
    };
    let c_end = counters(&fp)?;
    drop(fp);
    drop(tg);
    for (ns, dev) in [(&lab.fwd, "a"), (&lab.sink, "s0")] {
        let _ = netns::run(
            "ip",
            &[
                "netns",
                "exec",
                ns.name(),
                "sh",
                "-c",
                &format!("echo 0 > /sys/class/net/{dev}/threaded"),
            ],
        );
    }

    let seconds = (s1s.0 - s0s.0).as_secs_f64();
    let received = s1s.1 - s0s.1;
    let bytes = s1s.2 - s0s.2;
    let napi_s = (s1s.3 - s0s.3) as f64 * 1e-9;
    let ksoft_s = (s1s.4 - s0s.4) as f64 * 1e-9;
    let hz = cpu::ticks_per_sec() as f64;
    let busy_s = (s1s.5 - s0s.5) as f64 / hz;
    let per = |secs: f64| {
        if secs > 0.0 {
            received as f64 / secs
        } else {
            0.0
        }
    };
    let mut measured = std::collections::BTreeMap::new();
    for c in Counter::ALL {
        let d = s1s.6[c as usize] - s0s.6[c as usize];
        if d > 0 {
            measured.insert(c.label().to_string(), d);
        }
    }
    let slow = c_end[Counter::Slow as usize] - c_start[Counter::Slow as usize];
    Ok(Row {
        mode: "engine",
        direction: Some(dir),
        backend: Backend::XdpFast,
        tx_mode: None,
        rx_mode: None,
        generator: "xdp-live-frames",
        size,
        frame_bytes,
        out_frame_bytes,
        batch: 64,
        seconds,
        forwarded: received,
        pps: received as f64 / seconds,
        fwd_cpu,
        fwd_thread_cpu_s: napi_s,
        ksoftirqd_cpu_s: ksoft_s,
        cpu_softirq_s: 0.0,
        pps_per_core: per(napi_s + ksoft_s),
        fwd_thread_runtime_s: napi_s,
        pps_per_core_sched: per(napi_s + ksoft_s),
        generated: runs.load(Ordering::Relaxed),
        sink_received: received,
        fwd_rx_dropped: 0,
        fwd_tx_dropped: 0,
        engine: None,
        fastpath: Some(FastPathRow {
            xdp_mode: match mode {
                AttachMode::Native => "native",
                AttachMode::Generic => "generic",
            },
            native_error,
            napi_thread_s: napi_s,
            fwd_cpu_busy_s: busy_s,
            pps_per_busy_cpu: per(busy_s),
            generator_runs: runs.load(Ordering::Relaxed),
            counters: measured,
            slow_path: slow,
            sink_frame_bytes: if received > 0 {
                bytes as f64 / received as f64
            } else {
                0.0
            },
        }),
    })
}
