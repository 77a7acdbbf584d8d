//! The address plan: a pure function from (prefix, node count, UE pool) to the description of every
//! namespace, interface, MAC, address and route. Nothing here touches the system.
//!
//! Nodes are numbered `0..N` (the values a GPT maps keys to). For node `i`:
//!
//! | namespace | interface | MAC | address | peer |
//! |---|---|---|---|---|
//! | `P-node{i}` | `inet` | `02:73:62:01:hi:lo` | `10.1.{i}.1/24` | `P-inet{i}`/`eth0` |
//! | `P-node{i}` | `ran` | `02:73:62:02:hi:lo` | `10.2.{i}.1/24` | `P-ran{i}`/`eth0` |
//! | `P-node{i}` | `fabric` | `02:73:62:03:hi:lo` | `10.0.0.{i+1}/24` | `P-sw`/`node{i}` (bridge port) |
//! | `P-inet{i}` | `eth0` | `02:73:62:04:hi:lo` | `10.1.{i}.2/24` | the node's `inet` |
//! | `P-ran{i}` | `eth0` | `02:73:62:05:hi:lo` | `10.2.{i}.2/24` | the node's `ran` |
//! | `P-sw` | `node{i}` | `02:73:62:06:hi:lo` | none (bridge port of `br0`) | the node's `fabric` |
//! | `P-node{i}` | `ctl` | `02:73:62:08:hi:lo` | `10.3.0.{i+1}/24` | `P-cp`/`node{i}` (bridge port) |
//! | `P-cp` | `node{i}` | `02:73:62:09:hi:lo` | none (bridge port of `cpbr0`) | the node's `ctl` |
//! | `P-cp` | `cpbr0` (bridge) | `02:73:62:0a:00:00` | `10.3.0.254/24` | its ports |
//!
//! where `hi:lo` is the node index as 16 bits and `02:73:62` is a locally administered prefix
//! ("sb"). The bridge `br0` itself has MAC `02:73:62:07:00:00`. Routes: in a node, the UE pool goes
//! to the RAN side (`via 10.2.{i}.2 dev ran`) and the default route to the Internet side
//! (`via 10.1.{i}.2 dev inet`); the Internet-side namespace's default route is the node's `inet`
//! address, the RAN-side namespace's default route the node's `ran` address. All neighbour entries
//! on the data links are static (`nud permanent`), so no ARP is needed there; IPv6 is off
//! everywhere. These addresses exist only inside the cluster's own namespaces.
//!
//! The control network `10.3.0.0/24` is for control-plane peers (an SMF, an operator's tools):
//! the namespace `P-cp` reaches every node's control address `10.3.0.{i+1}` through the bridge
//! `cpbr0` (an ordinary learning bridge; ARP resolves addresses there), and each node serves
//! PFCP on `10.3.0.{i+1}:8805` ([`PFCP_PORT`], UDP), gRPC on `10.3.0.{i+1}:50051`
//! ([`GRPC_PORT`]) and Prometheus metrics on `http://10.3.0.{i+1}:9100/metrics`
//! ([`METRICS_PORT`]); the description lists these per node ([`NodeDesc::pfcp_addr`],
//! [`NodeDesc::grpc_addr`], [`NodeDesc::metrics_url`]) and the control namespace in
//! [`Description::control`]. The engine never sees this network: its ports are `inet`, `ran`
//! and `fabric`, and `ctl` belongs to the node's kernel.
//!
//! MTUs: the `inet` and `ctl` links carry ordinary 1500-byte packets ([`EDGE_MTU`]); the `ran`
//! links (N3/S1-U) take [`RAN_MTU`] = 9000, as operators configure N3, so a full 1500-byte
//! Internet packet plus its 36-44 bytes of GTP-U tunnel headers reaches the gNB whole; the fabric
//! links (each node's `fabric`, its bridge port and `br0`) take [`FABRIC_MTU`] = 9000, so a frame
//! that gained a fabric shim or a GTP-U tunnel header (up to ~100 bytes) still crosses the
//! fabric. Every veth end has its checksum and segmentation offloads off (see [`crate::up`]).

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::TopoError;

/// Most nodes a plan supports (the third octet of the link subnets and the fabric host part).
pub const MAX_NODES: usize = 250;

/// MTU of the `inet` and `ctl` links (and of old descriptions that did not record one).
pub const EDGE_MTU: u32 = 1500;

/// MTU of the `ran` links (N3 / S1-U, both ends): jumbo frames, so a full-size Internet packet
/// fits with its tunnel headers (the node's `ran_mtu` follows it).
pub const RAN_MTU: u32 = 9000;

/// MTU of the fabric links and the bridge: room for a shim or tunnel header on a full-size packet.
pub const FABRIC_MTU: u32 = 9000;

fn default_mtu() -> u32 {
    EDGE_MTU
}

/// Version of the JSON description format. Fields added since (MTUs, the control network) have
/// serde defaults, so older descriptions of version 1 still load.
pub const DESCRIPTION_VERSION: u32 = 1;

/// UDP port of each node's PFCP endpoint (TS 29.244) on its control address.
pub const PFCP_PORT: u16 = 8805;

/// TCP port of each node's gRPC operator API on its control address.
pub const GRPC_PORT: u16 = 50051;

/// TCP port of each node's Prometheus endpoint (`/metrics`) on its control address.
pub const METRICS_PORT: u16 = 9100;

/// The control network's address of node `i`: `10.3.0.{i+1}` (`i` < [`MAX_NODES`]).
pub fn control_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 3, 0, (i + 1) as u8)
}

/// The control bridge's address in the control namespace, `10.3.0.254` (prefix length 24).
pub const CONTROL_BRIDGE_IP: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 254);

/// A MAC address, written `02:73:62:01:00:00` in JSON.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mac(pub [u8; 6]);

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::str::FromStr for Mac {
    type Err = TopoError;
    fn from_str(s: &str) -> Result<Self, TopoError> {
        let bad = || TopoError::Parse(format!("bad MAC address {s:?}"));
        let mut out = [0u8; 6];
        let mut parts = s.split(':');
        for b in &mut out {
            let p = parts.next().ok_or_else(bad)?;
            if p.len() != 2 {
                return Err(bad());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Mac(out))
    }
}

impl Serialize for Mac {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Mac {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An IPv4 prefix such as `100.64.0.0/10`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Cidr {
    /// Network address (host bits zero).
    pub addr: Ipv4Addr,
    /// Prefix length, 0..=32.
    pub len: u8,
}

impl Cidr {
    /// Whether `ip` lies inside this prefix.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.len))
        };
        u32::from(ip) & mask == u32::from(self.addr) & mask
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl std::str::FromStr for Cidr {
    type Err = TopoError;
    fn from_str(s: &str) -> Result<Self, TopoError> {
        let bad = || TopoError::Parse(format!("bad IPv4 prefix {s:?} (want a.b.c.d/len)"));
        let (a, l) = s.split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = a.parse().map_err(|_| bad())?;
        let len: u8 = l.parse().map_err(|_| bad())?;
        if len > 32 {
            return Err(bad());
        }
        let mask = if len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(len))
        };
        Ok(Cidr {
            addr: Ipv4Addr::from(u32::from(addr) & mask),
            len,
        })
    }
}

impl Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// How a node moves downstream traffic from `inet` to `ran` until the engine exists.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Forwarding {
    /// The kernel forwards (`net.ipv4.ip_forward=1`, UE pool routed to the RAN side).
    Kernel,
    /// A user-space process per node (started by the caller of [`crate::up`]); kernel forwarding
    /// is off so every frame is forwarded exactly once.
    User,
    /// Nothing forwards (kernel forwarding off, no process): for running the engine.
    None,
}

/// One end of a veth pair with its settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Iface {
    /// Namespace the interface lives in.
    pub netns: String,
    /// Interface name inside that namespace.
    pub name: String,
    /// Its MAC address.
    pub mac: Mac,
    /// Its IPv4 address with prefix length (`10.1.0.1/24`), if it has one.
    pub addr: Option<String>,
    /// Its MTU ([`EDGE_MTU`] or [`FABRIC_MTU`]); descriptions written before this field existed
    /// read as [`EDGE_MTU`], what those clusters had.
    #[serde(default = "default_mtu")]
    pub mtu: u32,
}

impl Iface {
    /// The IPv4 address without the prefix length.
    pub fn ip(&self) -> Option<Ipv4Addr> {
        self.addr
            .as_deref()
            .and_then(|a| a.split('/').next())
            .and_then(|a| a.parse().ok())
    }
}

/// A veth pair: our end and the peer end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// The end inside the node namespace.
    pub local: Iface,
    /// The other end (neighbour namespace, or bridge port in the switch namespace).
    pub peer: Iface,
}

/// A route installed in a namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// Destination prefix, or `default`.
    pub dst: String,
    /// Next hop.
    pub via: Ipv4Addr,
    /// Outgoing interface.
    pub dev: String,
}

/// One cluster node and its two neighbour namespaces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeDesc {
    /// Node index, `0..N`.
    pub index: usize,
    /// The node's namespace (`P-node{i}`).
    pub netns: String,
    /// The Internet-side neighbour namespace (`P-inet{i}`).
    pub inet_netns: String,
    /// The base-station-side neighbour namespace (`P-ran{i}`).
    pub ran_netns: String,
    /// `inet` port and its peer `eth0` in the Internet-side namespace.
    pub inet: Link,
    /// `ran` port and its peer `eth0` in the RAN-side namespace.
    pub ran: Link,
    /// `fabric` port and its peer, a port of the bridge in the switch namespace.
    pub fabric: Link,
    /// Routes in the node namespace.
    pub routes: Vec<Route>,
    /// Routes in the Internet-side namespace.
    pub inet_routes: Vec<Route>,
    /// Routes in the RAN-side namespace.
    pub ran_routes: Vec<Route>,
    /// `ctl` port and its peer, a port of the control bridge in the control namespace (absent
    /// in descriptions of clusters made before the control network existed, as are the
    /// addresses below).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<Link>,
    /// The node's address on the control network (`10.3.0.{i+1}`, on `ctl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_addr: Option<Ipv4Addr>,
    /// Where the node's PFCP endpoint listens (UDP, `control_addr:`[`PFCP_PORT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pfcp_addr: Option<SocketAddr>,
    /// Where the node's gRPC operator API listens (TCP, `control_addr:`[`GRPC_PORT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_addr: Option<SocketAddr>,
    /// The node's Prometheus endpoint (`http://control_addr:`[`METRICS_PORT`]`/metrics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_url: Option<String>,
}

impl NodeDesc {
    /// Where the node's Prometheus endpoint listens (TCP, `control_addr:`[`METRICS_PORT`]).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.control_addr
            .map(|a| SocketAddr::from((a, METRICS_PORT)))
    }
}

/// The control network: a namespace for control-plane peers with one bridge joining every
/// node's `ctl` port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlDesc {
    /// Namespace (`P-cp`).
    pub netns: String,
    /// Bridge name (`cpbr0`).
    pub bridge: String,
    /// Bridge MAC.
    pub mac: Mac,
    /// The bridge's IPv4 address with prefix length (`10.3.0.254/24`): the control
    /// namespace's own address on the control network.
    pub addr: String,
    /// Bridge MTU ([`EDGE_MTU`]).
    pub mtu: u32,
}

impl ControlDesc {
    /// The bridge's IPv4 address without the prefix length.
    pub fn ip(&self) -> Option<Ipv4Addr> {
        self.addr.split('/').next().and_then(|a| a.parse().ok())
    }

    /// The control network's prefix (`10.3.0.0/24`): the addresses the control namespace
    /// may use (the default of the PFCP endpoints' allowed peers, `cluster up --smf-allow`).
    pub fn network(&self) -> Option<(Ipv4Addr, u8)> {
        let (_, len) = self.addr.split_once('/')?;
        let len: u8 = len.parse().ok().filter(|l| *l <= 32)?;
        let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
        Some((Ipv4Addr::from(u32::from(self.ip()?) & mask), len))
    }
}

/// The switch: one namespace with one bridge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchDesc {
    /// Namespace (`P-sw`).
    pub netns: String,
    /// Bridge name (`br0`).
    pub bridge: String,
    /// Bridge MAC.
    pub mac: Mac,
    /// Bridge MTU ([`FABRIC_MTU`]; [`EDGE_MTU`] in descriptions that did not record one).
    #[serde(default = "default_mtu")]
    pub mtu: u32,
}

/// Everything `cluster up` made, as written to `cluster.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Description {
    /// Format version ([`DESCRIPTION_VERSION`]).
    pub version: u32,
    /// Name prefix of every namespace.
    pub prefix: String,
    /// State directory (description, journal, forwarder stats and logs).
    pub dir: PathBuf,
    /// The UE address pool routed to the RAN side.
    pub ue_pool: Cidr,
    /// How nodes forward downstream traffic.
    pub forwarding: Forwarding,
    /// The switch.
    pub switch: SwitchDesc,
    /// The control network (absent in descriptions made before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlDesc>,
    /// The nodes, index order.
    pub nodes: Vec<NodeDesc>,
}

impl Description {
    /// Every namespace of the cluster: switch first, then the control namespace (if any), then
    /// per node its own, Internet-side and RAN-side namespaces.
    pub fn namespaces(&self) -> Vec<String> {
        let mut v = vec![self.switch.netns.clone()];
        v.extend(self.control.iter().map(|c| c.netns.clone()));
        for n in &self.nodes {
            v.push(n.netns.clone());
            v.push(n.inet_netns.clone());
            v.push(n.ran_netns.clone());
        }
        v
    }

    /// The node with index `i`.
    pub fn node(&self, i: usize) -> Result<&NodeDesc, TopoError> {
        self.nodes.get(i).ok_or(TopoError::NoSuchNode {
            node: i,
            nodes: self.nodes.len(),
        })
    }
}

/// `02:73:62:<kind>:<hi>:<lo>`.
pub fn mac(kind: u8, index: usize) -> Mac {
    let i = index as u16;
    Mac([0x02, 0x73, 0x62, kind, (i >> 8) as u8, i as u8])
}

/// Checks a name prefix: 1..=24 characters of `[A-Za-z0-9_]`, optionally with inner `-`.
pub fn check_prefix(prefix: &str) -> Result<(), TopoError> {
    let ok = !prefix.is_empty()
        && prefix.len() <= 24
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !prefix.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(TopoError::BadPrefix(prefix.to_string()))
    }
}

/// Computes the full description of an `nodes`-node cluster. Pure: touches nothing.
pub fn plan(
    prefix: &str,
    nodes: usize,
    ue_pool: Cidr,
    forwarding: Forwarding,
    dir: PathBuf,
) -> Result<Description, TopoError> {
    check_prefix(prefix)?;
    if nodes == 0 || nodes > MAX_NODES {
        return Err(TopoError::BadNodeCount(nodes));
    }
    let sw = format!("{prefix}-sw");
    let cp = format!("{prefix}-cp");
    let iface = |netns: &str, name: &str, mac: Mac, addr: Option<String>| Iface {
        netns: netns.to_string(),
        name: name.to_string(),
        mac,
        addr,
        mtu: if name == "fabric" || netns == sw {
            FABRIC_MTU
        } else {
            EDGE_MTU
        },
    };
    let nodes = (0..nodes)
        .map(|i| {
            let node_ns = format!("{prefix}-node{i}");
            let inet_ns = format!("{prefix}-inet{i}");
            let ran_ns = format!("{prefix}-ran{i}");
            let inet = Link {
                local: iface(&node_ns, "inet", mac(1, i), Some(format!("10.1.{i}.1/24"))),
                peer: iface(&inet_ns, "eth0", mac(4, i), Some(format!("10.1.{i}.2/24"))),
            };
            let mut ran = Link {
                local: iface(&node_ns, "ran", mac(2, i), Some(format!("10.2.{i}.1/24"))),
                peer: iface(&ran_ns, "eth0", mac(5, i), Some(format!("10.2.{i}.2/24"))),
            };
            ran.local.mtu = RAN_MTU;
            ran.peer.mtu = RAN_MTU;
            let fabric = Link {
                local: iface(
                    &node_ns,
                    "fabric",
                    mac(3, i),
                    Some(format!("10.0.0.{}/24", i + 1)),
                ),
                peer: iface(&sw, &format!("node{i}"), mac(6, i), None),
            };
            let control = Link {
                local: iface(
                    &node_ns,
                    "ctl",
                    mac(8, i),
                    Some(format!("{}/24", control_ip(i))),
                ),
                peer: iface(&cp, &format!("node{i}"), mac(9, i), None),
            };
            NodeDesc {
                index: i,
                control: Some(control),
                control_addr: Some(control_ip(i)),
                pfcp_addr: Some(SocketAddr::from((control_ip(i), PFCP_PORT))),
                grpc_addr: Some(SocketAddr::from((control_ip(i), GRPC_PORT))),
                metrics_url: Some(format!("http://{}:{METRICS_PORT}/metrics", control_ip(i))),
                routes: vec![
                    Route {
                        dst: ue_pool.to_string(),
                        via: Ipv4Addr::new(10, 2, i as u8, 2),
                        dev: "ran".into(),
                    },
                    Route {
                        dst: "default".into(),
                        via: Ipv4Addr::new(10, 1, i as u8, 2),
                        dev: "inet".into(),
                    },
                ],
                inet_routes: vec![Route {
                    dst: "default".into(),
                    via: Ipv4Addr::new(10, 1, i as u8, 1),
                    dev: "eth0".into(),
                }],
                ran_routes: vec![Route {
                    dst: "default".into(),
                    via: Ipv4Addr::new(10, 2, i as u8, 1),
                    dev: "eth0".into(),
                }],
                netns: node_ns,
                inet_netns: inet_ns,
                ran_netns: ran_ns,
                inet,
                ran,
                fabric,
            }
        })
        .collect();
    Ok(Description {
        version: DESCRIPTION_VERSION,
        prefix: prefix.to_string(),
        dir,
        ue_pool,
        forwarding,
        switch: SwitchDesc {
            netns: sw,
            bridge: "br0".into(),
            mac: mac(7, 0),
            mtu: FABRIC_MTU,
        },
        control: Some(ControlDesc {
            netns: cp,
            bridge: "cpbr0".into(),
            mac: mac(10, 0),
            addr: format!("{CONTROL_BRIDGE_IP}/24"),
            mtu: EDGE_MTU,
        }),
        nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Cidr {
        "100.64.0.0/10".parse().unwrap()
    }

    #[test]
    fn plan_is_deterministic_and_unique() {
        let a = plan("t", 4, pool(), Forwarding::User, "/tmp/x".into()).unwrap();
        let b = plan("t", 4, pool(), Forwarding::User, "/tmp/x".into()).unwrap();
        assert_eq!(a, b);
        let mut macs = std::collections::HashSet::new();
        let mut addrs = std::collections::HashSet::new();
        for n in &a.nodes {
            for l in [&n.inet, &n.ran, &n.fabric, n.control.as_ref().unwrap()] {
                for f in [&l.local, &l.peer] {
                    assert!(macs.insert(f.mac), "duplicate MAC {}", f.mac);
                    if let Some(ip) = f.ip() {
                        assert!(addrs.insert(ip), "duplicate address {ip}");
                    }
                }
            }
        }
        let cp = a.control.as_ref().unwrap();
        assert!(macs.insert(a.switch.mac));
        assert!(macs.insert(cp.mac));
        assert!(addrs.insert(cp.ip().unwrap()));
        assert_eq!(a.namespaces().len(), 2 + 3 * 4);
        assert_eq!(a.namespaces()[1], "t-cp");
        let unique: std::collections::HashSet<_> = a.namespaces().into_iter().collect();
        assert_eq!(unique.len(), 2 + 3 * 4);
        assert_eq!(a.nodes[3].fabric.local.addr.as_deref(), Some("10.0.0.4/24"));
        assert_eq!(a.nodes[2].inet.peer.mac.to_string(), "02:73:62:04:00:02");
        for n in &a.nodes {
            for f in [&n.inet.local, &n.inet.peer] {
                assert_eq!(f.mtu, EDGE_MTU, "{f:?}");
            }
            for f in [&n.ran.local, &n.ran.peer] {
                assert_eq!(f.mtu, RAN_MTU, "{f:?}");
            }
            assert_eq!(
                (n.fabric.local.mtu, n.fabric.peer.mtu),
                (FABRIC_MTU, FABRIC_MTU)
            );
        }
        assert_eq!(a.switch.mtu, FABRIC_MTU);
    }

    #[test]
    fn control_network_plan() {
        let a = plan("c", 3, pool(), Forwarding::None, "/tmp/x".into()).unwrap();
        let cp = a.control.as_ref().unwrap();
        assert_eq!(
            (cp.netns.as_str(), cp.bridge.as_str(), cp.addr.as_str()),
            ("c-cp", "cpbr0", "10.3.0.254/24")
        );
        assert_eq!(cp.network(), Some((Ipv4Addr::new(10, 3, 0, 0), 24)));
        assert_eq!(cp.mac.to_string(), "02:73:62:0a:00:00");
        assert_eq!(cp.mtu, EDGE_MTU);
        let n = &a.nodes[2];
        let ctl = n.control.as_ref().unwrap();
        assert_eq!(
            (ctl.local.netns.as_str(), ctl.local.name.as_str()),
            ("c-node2", "ctl")
        );
        assert_eq!(ctl.local.addr.as_deref(), Some("10.3.0.3/24"));
        assert_eq!(ctl.local.mac.to_string(), "02:73:62:08:00:02");
        assert_eq!(
            (ctl.peer.netns.as_str(), ctl.peer.name.as_str()),
            ("c-cp", "node2")
        );
        assert_eq!(ctl.peer.addr, None);
        assert_eq!(ctl.peer.mac.to_string(), "02:73:62:09:00:02");
        assert_eq!((ctl.local.mtu, ctl.peer.mtu), (EDGE_MTU, EDGE_MTU));
        assert_eq!(n.control_addr, Some(Ipv4Addr::new(10, 3, 0, 3)));
        assert_eq!(n.pfcp_addr, Some("10.3.0.3:8805".parse().unwrap()));
        assert_eq!(n.grpc_addr, Some("10.3.0.3:50051".parse().unwrap()));
        assert_eq!(
            n.metrics_url.as_deref(),
            Some("http://10.3.0.3:9100/metrics")
        );
        assert_eq!(n.metrics_addr(), Some("10.3.0.3:9100".parse().unwrap()));
        // The last possible node still has a host address below the bridge's.
        let big = plan("c", MAX_NODES, pool(), Forwarding::None, "/x".into()).unwrap();
        let last = big.nodes.last().unwrap().control_addr.unwrap();
        assert_eq!(last, Ipv4Addr::new(10, 3, 0, 250));
        // In the JSON, as the issue asks: per node `pfcp_addr`, `grpc_addr`, `metrics_url`.
        let v = serde_json::to_value(&a).unwrap();
        assert_eq!(v["nodes"][1]["pfcp_addr"], "10.3.0.2:8805");
        assert_eq!(v["nodes"][1]["grpc_addr"], "10.3.0.2:50051");
        assert_eq!(v["nodes"][1]["metrics_url"], "http://10.3.0.2:9100/metrics");
        assert_eq!(v["nodes"][1]["control_addr"], "10.3.0.2");
        assert_eq!(v["control"]["netns"], "c-cp");
        assert_eq!(v["control"]["addr"], "10.3.0.254/24");
    }

    #[test]
    fn descriptions_without_a_control_network_still_load() {
        let a = plan("old", 2, pool(), Forwarding::Kernel, "/run/x".into()).unwrap();
        let mut v = serde_json::to_value(&a).unwrap();
        v.as_object_mut().unwrap().remove("control").unwrap();
        for n in v["nodes"].as_array_mut().unwrap() {
            let n = n.as_object_mut().unwrap();
            for k in [
                "control",
                "control_addr",
                "pfcp_addr",
                "grpc_addr",
                "metrics_url",
            ] {
                n.remove(k).unwrap();
            }
        }
        let b: Description = serde_json::from_value(v).unwrap();
        assert_eq!(b.control, None);
        assert_eq!(b.nodes[1].pfcp_addr, None);
        assert_eq!(b.nodes[1].metrics_addr(), None);
        assert_eq!(b.nodes[1].fabric, a.nodes[1].fabric);
        assert_eq!(b.namespaces().len(), 1 + 2 * 3);
        // And such a description writes back without the absent fields.
        let s = serde_json::to_string(&b).unwrap();
        assert!(
            !s.contains("pfcp_addr") && !s.contains("\"control\""),
            "{s}"
        );
    }

    #[test]
    fn descriptions_without_mtus_still_load() {
        let a = plan("old", 1, pool(), Forwarding::Kernel, "/run/x".into()).unwrap();
        let mut v = serde_json::to_value(&a).unwrap();
        let n = &mut v["nodes"][0];
        for l in ["inet", "ran", "fabric"] {
            for e in ["local", "peer"] {
                n[l][e].as_object_mut().unwrap().remove("mtu").unwrap();
            }
        }
        v["switch"].as_object_mut().unwrap().remove("mtu").unwrap();
        let b: Description = serde_json::from_value(v).unwrap();
        assert_eq!(b.nodes[0].fabric.local.mtu, EDGE_MTU);
        assert_eq!(b.switch.mtu, EDGE_MTU);
        assert_eq!(b.nodes[0].inet, a.nodes[0].inet);
    }

    #[test]
    fn json_round_trip() {
        let a = plan("rt", 2, pool(), Forwarding::Kernel, "/run/x".into()).unwrap();
        let s = serde_json::to_string_pretty(&a).unwrap();
        let b: Description = serde_json::from_str(&s).unwrap();
        assert_eq!(a, b);
        assert!(s.contains("\"02:73:62:01:00:01\""));
        assert!(s.contains("\"100.64.0.0/10\""));
    }

    #[test]
    fn rejects_bad_input() {
        assert!(plan("", 2, pool(), Forwarding::User, "/x".into()).is_err());
        assert!(plan("a b", 2, pool(), Forwarding::User, "/x".into()).is_err());
        assert!(plan("-a", 2, pool(), Forwarding::User, "/x".into()).is_err());
        assert!(plan("a", 0, pool(), Forwarding::User, "/x".into()).is_err());
        assert!(plan("a", 251, pool(), Forwarding::User, "/x".into()).is_err());
        assert!("1.2.3.4/33".parse::<Cidr>().is_err());
        assert!("02:00:00:00:00".parse::<Mac>().is_err());
        assert!("02:00:00:00:00:0g".parse::<Mac>().is_err());
    }

    #[test]
    fn cidr_contains() {
        let c: Cidr = "100.64.1.7/10".parse().unwrap();
        assert_eq!(c.to_string(), "100.64.0.0/10");
        assert!(c.contains("100.127.255.255".parse().unwrap()));
        assert!(!c.contains("100.128.0.0".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
    }
}
