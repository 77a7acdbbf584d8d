//! A node's configuration file (`node{i}.json` in the cluster's state directory, written by
//! `cluster up`; `scalebricks node --config FILE` reads it).

use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// One port of the node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortFile {
    /// Interface name inside the node's namespace.
    pub ifname: String,
    /// Its MAC, `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    /// The next hop's MAC.
    pub peer_mac: String,
    /// Its IPv4 address (answered in ARP), if any.
    pub ip: Option<Ipv4Addr>,
}

/// Which packet I/O the node's ports use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum IoBackend {
    /// AF_PACKET (TPACKET_V2 frame rings: each frame handed over at once).
    #[default]
    Afpacket,
    /// AF_XDP in copy mode (feature `xdp`).
    Xdp,
    /// The XDP fast path (feature `fastpath`, module `fastpath`): `sb-xdp`'s programs on
    /// `inet`, `ran` and `fabric` forward what they can in the kernel, under the node's
    /// architecture; what they pass up reaches the engine on AF_PACKET ports, as with
    /// `afpacket`.
    #[serde(rename = "xdp-fast")]
    XdpFast,
}

/// Which FIB backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FibBackend {
    /// Our cuckoo table.
    #[default]
    Cuckoo,
    /// DPDK `rte_hash` (feature `dpdk`).
    RteHash,
}

/// Everything a node process needs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeFile {
    /// The cluster's identity: every table file must carry it.
    pub cluster_id: u64,
    /// This node's index.
    pub node: u16,
    /// `scalebricks`, `full-dup` or `hash-part`.
    pub arch: String,
    /// The FIB backend.
    #[serde(default)]
    pub fib: FibBackend,
    /// The packet I/O backend.
    #[serde(default)]
    pub io: IoBackend,
    /// Worker threads (each with its own socket per port, in a fanout group).
    pub workers: usize,
    /// Frames per batch.
    pub batch: usize,
    /// The key-hash seed of the GPT and the FIBs.
    pub seed: u64,
    /// The network namespace the ports are in (None: the current one).
    pub netns: Option<String>,
    /// `inet`, `ran`, `fabric`.
    pub inet: PortFile,
    /// The access port.
    pub ran: PortFile,
    /// The fabric port.
    pub fabric: PortFile,
    /// Every node's fabric MAC by index.
    pub fabric_macs: Vec<String>,
    /// Every node's `ran` (S1-U) address by index.
    pub ran_addrs: Vec<Ipv4Addr>,
    /// MTU of the `ran` link.
    pub ran_mtu: usize,
    /// The GPT image (ScaleBricks).
    pub gpt: Option<PathBuf>,
    /// This node's FIB entries.
    pub fib_table: PathBuf,
    /// This node's uplink entries.
    pub uplink_table: PathBuf,
    /// Where the counters go (JSON, rewritten every second and on exit).
    pub counters: PathBuf,
    /// The control plane (ScaleBricks with the cuckoo FIB): the GPT is built by the owners of
    /// its block ranges and changes while the node forwards. None: the tables are fixed.
    #[serde(default)]
    pub control: Option<crate::control::ControlFile>,
    /// Where the node serves Prometheus metrics (`GET /metrics`), in its namespace.
    #[serde(default)]
    pub metrics: Option<std::net::SocketAddr>,
    /// The operator API (gRPC, [`crate::api`]); needs the control plane.
    #[serde(default)]
    pub api: Option<ApiFile>,
}

/// Where and how a node serves the operator API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiFile {
    /// The node's API address (its `grpc_addr`), in its namespace.
    pub addr: std::net::SocketAddr,
    /// The file holding the cluster's API token (one line; `cluster up` writes it, mode 0600).
    pub token_file: PathBuf,
    /// Every node's API address by index.
    pub peers: Vec<std::net::SocketAddr>,
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// It is not valid JSON of the expected shape.
    #[error("{path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: serde_json::Error,
    },
    /// A field's value is wrong.
    #[error("{0}")]
    Invalid(String),
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Result<[u8; 6], ConfigError> {
    let mut m = [0u8; 6];
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(ConfigError::Invalid(format!("bad MAC address {s:?}")));
    }
    for (b, p) in m.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16)
            .map_err(|_| ConfigError::Invalid(format!("bad MAC address {s:?}")))?;
    }
    Ok(m)
}

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl NodeFile {
    /// Reads and checks a configuration file.
    pub fn load(path: &Path) -> Result<NodeFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let c: NodeFile = serde_json::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        c.check()?;
        Ok(c)
    }

    /// Checks the values a parser cannot.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |s: String| Err(ConfigError::Invalid(s));
        self.arch()?;
        let n = self.fabric_macs.len();
        if n == 0 || usize::from(self.node) >= n {
            return bad(format!("node {} of a {n}-node cluster", self.node));
        }
        if self.ran_addrs.len() != n {
            return bad(format!(
                "{} ran addresses for {n} nodes",
                self.ran_addrs.len()
            ));
        }
        if !(1..=64).contains(&self.workers) {
            return bad(format!("workers must be 1 to 64, not {}", self.workers));
        }
        if !(1..=1024).contains(&self.batch) {
            return bad(format!("batch must be 1 to 1024, not {}", self.batch));
        }
        if !(576..=9000).contains(&self.ran_mtu) {
            return bad(format!("ran_mtu must be 576 to 9000, not {}", self.ran_mtu));
        }
        for m in &self.fabric_macs {
            parse_mac(m)?;
        }
        for p in [&self.inet, &self.ran, &self.fabric] {
            parse_mac(&p.mac)?;
            parse_mac(&p.peer_mac)?;
        }
        if self.arch()? == sb_engine::Arch::ScaleBricks
            && self.gpt.is_none()
            && self.control.is_none()
        {
            return bad("the scalebricks architecture needs a gpt file or a control plane".into());
        }
        if let Some(c) = &self.control {
            if self.arch()? != sb_engine::Arch::ScaleBricks {
                return bad("the control plane runs the scalebricks architecture only".into());
            }
            if self.fib != FibBackend::Cuckoo {
                return bad("live updates need the cuckoo FIB (rte_hash is built once)".into());
            }
            if c.peers.len() != n {
                return bad(format!("{} control addresses for {n} nodes", c.peers.len()));
            }
        }
        Ok(())
    }

    /// The architecture.
    pub fn arch(&self) -> Result<sb_engine::Arch, ConfigError> {
        self.arch.parse().map_err(ConfigError::Invalid)
    }
}
