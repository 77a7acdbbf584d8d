//! `scalebricks gen`: send stamped downstream traffic (Internet -> UE) into the nodes' `inet`
//! ports from the Internet-side namespaces, and/or write it to a pcap file.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use sb_io::afpacket::{AfPacketConfig, AfPacketPort};
use sb_io::Port;
use sb_topology::{Description, Forwarding};
use sb_traffic::dist::{FlowDist, SizeSpec};
use sb_traffic::frame::{FrameTemplate, Proto};
use sb_traffic::gen::{run_gen, GenConfig, Target};
use sb_traffic::pcap::PcapWriter;

#[derive(clap::Args)]
pub struct Args {
    /// Flows file: CSV whose first column is the UE IPv4 address (read by `sb_traffic::keys`;
    /// other columns ignored, a header line such as `ue,teid,enb,node` allowed).
    #[arg(long)]
    flows: PathBuf,
    /// Packets per second over all target nodes; 0 = as fast as possible.
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Packets to send in total.
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Frame size in bytes without FCS (74..=1514 for UDP, 86.. for TCP), or `imix`.
    #[arg(long, default_value = "128")]
    size: SizeSpec,
    /// Zipf exponent for the flow choice (flow k has weight 1/(k+1)^ALPHA); uniform without it.
    #[arg(long)]
    zipf: Option<f64>,
    /// Target node index, or `all` (packets round-robin over the nodes).
    #[arg(long, default_value = "all")]
    to: String,
    /// Transport protocol: udp or tcp.
    #[arg(long, default_value = "udp")]
    proto: Proto,
    /// Destination port of the packets.
    #[arg(long, default_value_t = 5000)]
    dst_port: u16,
    /// Also write every frame to this pcap file; with no cluster up, only write the file.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Cluster name prefix.
    #[arg(long, default_value = "sb")]
    name: String,
    /// Cluster state directory [default: /var/lib/scalebricks/PREFIX].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Without a cluster (pcap only): the number of nodes to address frames for.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// Frames per batch (and the depth of the rate limiter's token bucket).
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Random seed for the flow choice [default: random].
    #[arg(long)]
    seed: Option<u64>,
}

/// Which nodes `--to` names.
pub fn parse_targets(to: &str, nodes: usize) -> anyhow::Result<Vec<usize>> {
    if to == "all" {
        return Ok((0..nodes).collect());
    }
    let n: usize = to
        .parse()
        .with_context(|| format!("--to {to:?}: want a node index or `all`"))?;
    anyhow::ensure!(n < nodes, "--to {n}: the cluster has nodes 0..{nodes}");
    Ok(vec![n])
}

fn template(
    d: &Description,
    node: usize,
    proto: Proto,
    dst_port: u16,
) -> anyhow::Result<FrameTemplate> {
    let n = d.node(node)?;
    Ok(FrameTemplate {
        src_mac: n.inet.peer.mac.0,
        dst_mac: n.inet.local.mac.0,
        src_ip: n.inet.peer.ip().context("inet peer has no address")?,
        proto,
        dst_port,
    })
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let dir = super::cluster::state_dir(a.dir.clone(), &a.name);
    let flows = sb_traffic::flows::read_flows(&a.flows)?;
    let (desc, live) = match sb_topology::load(&dir) {
        Ok(d) => (d, true),
        Err(sb_topology::TopoError::NotUp(_)) if a.pcap.is_some() => {
            let pool = sb_topology::DEFAULT_UE_POOL.parse()?;
            (sb_topology::plan::plan(&a.name, a.nodes, pool, Forwarding::User, dir.clone())?, false)
        }
        Err(e) => {
            return Err(e).context(format!(
                "no running cluster in {} (start one with `scalebricks cluster up`, or pass --pcap to only write a file)",
                dir.display()
            ))
        }
    };
    let nodes = parse_targets(&a.to, desc.nodes.len())?;
    anyhow::ensure!(a.rate >= 0.0 && a.rate.is_finite(), "--rate must be >= 0");
    anyhow::ensure!((1..=1024).contains(&a.batch), "--batch must be 1..=1024");

    let mut ports: Vec<AfPacketPort> = Vec::new();
    if live {
        let cfg = AfPacketConfig {
            tx_only: true,
            ..AfPacketConfig::default()
        };
        for &n in &nodes {
            let ns = &desc.node(n)?.inet_netns;
            let p = sb_io::netns::in_netns(ns, || AfPacketPort::open("eth0", &cfg))
                .with_context(|| format!("entering namespace {ns}"))?
                .with_context(|| format!("opening eth0 in {ns}"))?;
            ports.push(p);
        }
    }
    let mut targets = Vec::new();
    let mut port_iter = ports.iter_mut();
    for &n in &nodes {
        targets.push(Target {
            node: n,
            template: template(&desc, n, a.proto, a.dst_port)?,
            port: port_iter.next().map(|p| p as &mut dyn Port),
        });
    }
    let seed = a.seed.unwrap_or_else(rand::random);
    let cfg = GenConfig {
        dist: match a.zipf {
            Some(alpha) => {
                anyhow::ensure!(alpha >= 0.0 && alpha.is_finite(), "--zipf must be >= 0");
                FlowDist::zipf(flows.len(), alpha)
            }
            None => FlowDist::uniform(flows.len()),
        },
        flows,
        size: a.size,
        rate: a.rate,
        count: a.count,
        batch: a.batch,
        seed,
        run_id: rand::random::<u32>() & !0xff,
    };
    let stop = AtomicBool::new(false);
    let mut pcap = match &a.pcap {
        Some(p) => {
            let f =
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
            Some(PcapWriter::new(std::io::BufWriter::new(f))?)
        }
        None => None,
    };
    let report = run_gen(&cfg, &mut targets, pcap.as_mut(), &stop)?;
    if let Some(w) = pcap {
        w.finish()?;
    }
    let mut v = serde_json::to_value(&report)?;
    v["flows"] = cfg.flows.len().into();
    v["nodes"] = serde_json::to_value(&nodes)?;
    v["live"] = live.into();
    v["seed"] = seed.into();
    if let Some(p) = &a.pcap {
        v["pcap"] = p.display().to_string().into();
    }
    println!("{}", serde_json::to_string(&v)?);
    Ok(())
}
