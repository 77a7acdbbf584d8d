//! The XDP fast path of a node whose I/O is `xdp-fast` (feature `fastpath`): `sb-xdp`'s
//! programs attached to the node's `inet` (`sb_inet`), `ran` (`sb_ran`) and `fabric`
//! (`sb_fabric`) ports, running the node's architecture (ScaleBricks, full duplication, hash
//! partitioning: `sb_xdp::Arch`), their maps filled from the node's tables at start and kept
//! in step with the control plane as a [`TableMirror`].
//!
//! - **Attachment**: native (driver) mode first; when the kernel refuses it the port is
//!   attached in generic (SKB) mode, which is logged and counted
//!   ([`XdpReport::generic_fallbacks`]). The programs are frags-aware (`xdp.frags`), so a
//!   veth whose peer's MTU is above a page (the cluster's 9000-byte `ran` and fabric links)
//!   takes them natively too: a jumbo frame then comes in several buffers, which the
//!   programs see as a packet longer than their first and pass to the slow path (whole, over
//!   3,072 bytes: up the kernel's path). A native redirect into a veth reaches its peer only
//!   when the peer has a NAPI instance (GRO on, or an XDP program): `cluster up --io
//!   xdp-fast` turns GRO on for the peers of every node's `inet`, `ran` and `fabric`.
//! - **The slow path**: whatever the programs do not finish (misses, ARP, ICMP errors,
//!   sessions with a policy, GTP-U signalling, fabric frames they do not finish) goes to the
//!   engine, which handles it exactly as without XDP. With one worker it arrives over AF_XDP:
//!   each port is a [`sb_io::xdp::SlowPathPort`], whose AF_XDP socket (copy mode, queue 0: a
//!   veth has one) is the port's entry in the programs' XSKMAP
//!   ([`TableMirror::slow_path_socket`]), so a slow frame costs one copy into the socket's
//!   UMEM instead of the kernel's receive path and an AF_PACKET copy. What the programs pass
//!   to the kernel (`XDP_PASS`: frames over 3,072 bytes, the fabric's frames without the shim,
//!   which are the node's own) reaches the port's AF_PACKET socket beside it, as every frame
//!   does without XDP; the engine transmits through that socket (frames of any size). With
//!   several workers (AF_PACKET fanout; one AF_XDP socket per queue) the XSKMAP stays empty
//!   and every slow frame goes up the kernel's path to the workers' AF_PACKET sockets. The
//!   counters file says which ports' slow path is AF_XDP (`xdp.slow_path_af_xdp`) and how
//!   many frames each port's engine took from its AF_XDP socket (`ports.*.rx_af_xdp`).
//!   Frames the programs redirect never reach the engine.
//! - **Tables**: the GPT (the live table's snapshot, or the fixed table; none under full
//!   duplication and hash partitioning, whose programs hash keys with the node's seed), every
//!   FIB and uplink entry the node holds (under full duplication every flow's, under hash
//!   partitioning its hash slice's: what its FIB holds), written before the programs are
//!   attached. Afterwards the
//!   control thread writes each change through the mirror ([`crate::mirror`]). A write the
//!   maps refuse (a map full) turns the programs off (everything to the engine), counted in
//!   [`XdpReport::write_errors`] and logged.

use crate::config::{parse_mac, NodeFile};
use crate::mirror::{TableMirror, XdpReport};
use crate::run::NodeError;
use sb_setsep::SetSep;
use sb_xdp::{Arch, AttachMode, Counter, FastPath, GptImage, NodeSetup, Prog, XdpError};

/// A node's loaded fast path.
pub struct NodeFastPath {
    fp: FastPath,
    node: u16,
    attached: Vec<(String, AttachMode)>,
    generic_fallbacks: u64,
    write_errors: u64,
    /// The ports whose slow path is an AF_XDP socket ([`TableMirror::slow_path_socket`]).
    slow_path: Vec<String>,
}

fn err(what: &str) -> impl FnOnce(XdpError) -> NodeError + '_ {
    move |e| NodeError::Unsupported(format!("XDP fast path: {what}: {}", chain(&e)))
}

/// An error and its sources, `: `-separated (aya's errors keep the kernel's reason in a
/// source).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut at = e.source();
    while let Some(c) = at {
        let t = c.to_string();
        // (aya's syscall errors repeat their message in their source)
        if !s.ends_with(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        at = c.source();
    }
    s
}

/// Entries of a table to size its map for: what it holds, or its room, whichever is more,
/// with a quarter more and at least 1024.
fn map_entries(len: usize, room: usize) -> u32 {
    let n = len.max(room);
    (n + n / 4).max(1024).min(u32::MAX as usize) as u32
}

impl NodeFastPath {
    /// Loads the programs for the node's architecture, fills the maps with `gpt` (None: the
    /// architectures without one), the FIB entries `fib` and the uplink entries `uplink`
    /// (each `(key, value)` as the node's tables hold them), and attaches the programs to the
    /// node's `inet`, `ran` and `fabric` ports (in its namespace). `room`: entries the node's
    /// tables have room for (the maps are sized for it).
    pub fn start(
        cfg: &NodeFile,
        gpt: Option<&SetSep>,
        fib: &[(Vec<u8>, Vec<u8>)],
        uplink: &[(Vec<u8>, Vec<u8>)],
        room: usize,
    ) -> Result<NodeFastPath, NodeError> {
        sb_xdp::root_and_bpf()
            .map_err(|e| NodeError::Unsupported(format!("XDP fast path: {e}")))?;
        let ifindex = |name: &str| -> Result<u32, NodeError> {
            let get = || sb_io::afpacket::ifindex(name);
            let r = match &cfg.netns {
                Some(ns) => sb_io::netns::in_netns(ns, get).and_then(|r| r),
                None => get(),
            };
            r.map(|i| i as u32).map_err(|source| NodeError::Port {
                port: name.to_string(),
                source,
            })
        };
        let (inet, ran, fabric) = (
            ifindex(&cfg.inet.ifname)?,
            ifindex(&cfg.ran.ifname)?,
            ifindex(&cfg.fabric.ifname)?,
        );
        let setup = NodeSetup {
            node: cfg.node,
            fabric_macs: cfg
                .fabric_macs
                .iter()
                .map(|m| parse_mac(m))
                .collect::<Result<_, _>>()?,
            ran_addrs: cfg.ran_addrs.clone(),
            ran_mtu: cfg.ran_mtu as u32,
            inet_mac: parse_mac(&cfg.inet.mac)?,
            inet_peer: parse_mac(&cfg.inet.peer_mac)?,
            ran_mac: parse_mac(&cfg.ran.mac)?,
            ran_peer: parse_mac(&cfg.ran.peer_mac)?,
            ifindex_inet: inet,
            ifindex_ran: ran,
            ifindex_fabric: fabric,
        };
        let arch: Arch = cfg
            .arch()?
            .label()
            .parse()
            .map_err(NodeError::Unsupported)?;
        let image = match gpt {
            Some(g) => GptImage::of(g).map_err(|e| err("the GPT")(e.into()))?,
            None if !arch.uses_gpt() => GptImage::none(cfg.seed),
            None => {
                return Err(NodeError::Unsupported(format!(
                    "the XDP fast path under {} needs the GPT",
                    arch.label()
                )))
            }
        };
        let mut fp = FastPath::load_arch(
            arch,
            setup,
            image,
            map_entries(fib.len(), room),
            map_entries(uplink.len(), room),
        )
        .map_err(err("loading"))?;
        // Off until every entry is in: the programs pass everything to the engine meanwhile
        // (nothing is attached yet either).
        fp.set_enabled(false).map_err(err("configuring"))?;
        for (k, v) in fib {
            let (k, v) = fib_entry(k, v).ok_or_else(|| {
                NodeError::Tables(format!(
                    "XDP fast path: a FIB entry of {}+{} bytes",
                    k.len(),
                    v.len()
                ))
            })?;
            fp.fib_insert(&k, &v).map_err(err("filling the FIB map"))?;
        }
        for (k, v) in uplink {
            let (k, v) = uplink_entry(k, v).ok_or_else(|| {
                NodeError::Tables(format!(
                    "XDP fast path: an uplink entry of {}+{} bytes",
                    k.len(),
                    v.len()
                ))
            })?;
            fp.uplink_insert(&k, &v)
                .map_err(err("filling the uplink map"))?;
        }
        fp.set_enabled(true).map_err(err("configuring"))?;
        let mut me = NodeFastPath {
            fp,
            node: cfg.node,
            attached: Vec::new(),
            generic_fallbacks: 0,
            write_errors: 0,
            slow_path: Vec::new(),
        };
        for (prog, port, ifindex) in [
            (Prog::Inet, &cfg.inet.ifname, inet),
            (Prog::Ran, &cfg.ran.ifname, ran),
            (Prog::Fabric, &cfg.fabric.ifname, fabric),
        ] {
            me.attach(cfg, prog, port, ifindex)?;
        }
        eprintln!(
            "node {}: XDP fast path on ({}): {}; {} FIB and {} uplink entries, GPT of {} blocks",
            cfg.node,
            arch.label(),
            me.attached
                .iter()
                .map(|(p, m)| format!("{p} {}", mode_name(*m)))
                .collect::<Vec<_>>()
                .join(", "),
            fib.len(),
            uplink.len(),
            me.fp.gpt().n_blocks
        );
        Ok(me)
    }

    /// Attaches `prog` to port `port` natively, or generically when native fails (logged and
    /// counted).
    fn attach(
        &mut self,
        cfg: &NodeFile,
        prog: Prog,
        port: &str,
        ifindex: u32,
    ) -> Result<(), NodeError> {
        let try_mode = |fp: &mut FastPath, mode| {
            let mut go = || fp.attach(prog, ifindex, mode);
            match &cfg.netns {
                Some(ns) => sb_io::netns::in_netns(ns, go).map_err(|source| NodeError::Port {
                    port: format!("namespace {ns}"),
                    source,
                }),
                None => Ok(go()),
            }
        };
        let mode = match try_mode(&mut self.fp, AttachMode::Native)? {
            Ok(()) => AttachMode::Native,
            Err(e) => {
                eprintln!(
                    "node {}: XDP on {port}: native mode refused ({}): generic mode",
                    cfg.node,
                    chain(&e)
                );
                try_mode(&mut self.fp, AttachMode::Generic)?
                    .map_err(err(&format!("attaching to {port}")))?;
                self.generic_fallbacks += 1;
                AttachMode::Generic
            }
        };
        self.attached.push((port.to_string(), mode));
        Ok(())
    }

    /// A write the maps refused: the programs stop answering (everything goes to the engine).
    fn failed(&mut self, what: &str, e: XdpError) {
        self.write_errors += 1;
        if self.fp.enabled() {
            eprintln!(
                "node {}: XDP fast path: {what} failed ({}): the programs pass every packet to the engine from now on",
                self.node,
                chain(&e)
            );
        }
        if let Err(e) = self.fp.set_enabled(false) {
            eprintln!(
                "node {}: XDP fast path: turning it off failed too ({e})",
                self.node
            );
        }
    }

    /// The loaded programs and maps.
    pub fn fast_path(&self) -> &FastPath {
        &self.fp
    }
}

fn mode_name(m: AttachMode) -> &'static str {
    match m {
        AttachMode::Native => "native",
        AttachMode::Generic => "generic",
    }
}

fn fib_entry(k: &[u8], v: &[u8]) -> Option<([u8; 16], [u8; 32])> {
    Some((k.try_into().ok()?, v.try_into().ok()?))
}

fn uplink_entry(k: &[u8], v: &[u8]) -> Option<([u8; 4], [u8; 24])> {
    Some((k.try_into().ok()?, v.try_into().ok()?))
}

impl TableMirror for NodeFastPath {
    fn fib_insert(&mut self, key: &[u8], value: &[u8]) {
        let r = match fib_entry(key, value) {
            Some((k, v)) => self.fp.fib_insert(&k, &v),
            None => Err(sb_xdp::LayoutError::Delta("a FIB entry of another size").into()),
        };
        if let Err(e) = r {
            self.failed("a FIB insert", e);
        }
    }

    fn fib_remove(&mut self, key: &[u8]) {
        let r = match <[u8; 16]>::try_from(key) {
            Ok(k) => self.fp.fib_remove(&k),
            Err(_) => Err(sb_xdp::LayoutError::Delta("a FIB key of another size").into()),
        };
        if let Err(e) = r {
            self.failed("a FIB removal", e);
        }
    }

    fn uplink_insert(&mut self, teid: &[u8], value: &[u8]) {
        let r = match uplink_entry(teid, value) {
            Some((k, v)) => self.fp.uplink_insert(&k, &v),
            None => Err(sb_xdp::LayoutError::Delta("an uplink entry of another size").into()),
        };
        if let Err(e) = r {
            self.failed("an uplink insert", e);
        }
    }

    fn uplink_remove(&mut self, teid: &[u8]) {
        let r = match <[u8; 4]>::try_from(teid) {
            Ok(k) => self.fp.uplink_remove(&k),
            Err(_) => Err(sb_xdp::LayoutError::Delta("a TEID of another size").into()),
        };
        if let Err(e) = r {
            self.failed("an uplink removal", e);
        }
    }

    fn gpt_delta(&mut self, d: &sb_setsep::Delta) {
        if let Err(e) = self.fp.apply_gpt_delta(d) {
            self.failed("a GPT delta", e);
        }
    }

    fn gpt_replace(&mut self, t: &SetSep) {
        let r = GptImage::of(t)
            .map_err(XdpError::from)
            .and_then(|g| self.fp.load_gpt(g));
        if let Err(e) = r {
            self.failed("replacing the GPT", e);
        }
    }

    fn stand_ins(&mut self, by: &[Option<u16>]) {
        if let Err(e) = self.fp.set_stand_ins(by) {
            self.failed("setting the stand-ins", e);
        }
    }

    fn report(&self) -> XdpReport {
        let counters = match self.fp.counters() {
            Ok(c) => Counter::ALL
                .iter()
                .zip(c)
                .map(|(k, v)| (k.label().to_string(), v))
                .collect(),
            Err(_) => Vec::new(),
        };
        XdpReport {
            attached: self
                .attached
                .iter()
                .map(|(p, m)| (p.clone(), mode_name(*m).to_string()))
                .collect(),
            generic_fallbacks: self.generic_fallbacks,
            enabled: self.fp.enabled(),
            write_errors: self.write_errors,
            counters,
            slow_path_af_xdp: self.slow_path.clone(),
        }
    }

    fn slow_path_socket(&mut self, port: usize, fd: std::os::fd::RawFd) -> Result<(), String> {
        let (prog, name) = match port {
            0 => (Prog::Inet, "inet"),
            1 => (Prog::Ran, "ran"),
            2 => (Prog::Fabric, "fabric"),
            _ => return Err(format!("no port {port}")),
        };
        self.fp
            .set_slow_path_socket(prog, 0, fd)
            .map_err(|e| chain(&e))?;
        self.slow_path.push(name.to_string());
        Ok(())
    }
}
