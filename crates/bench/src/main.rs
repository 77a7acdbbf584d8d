//! `scalebricks-bench`: the benchmark binary. It only parses the command line and calls the
//! harnesses of the `sb-bench` library. `scalebricks bench ...` runs this binary.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "scalebricks-bench",
    version,
    about = "Benchmarks: our structures and their peers side by side, JSON out"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// SetSep against DPDK EFD, sux VFunc, ptr_hash and hashbrown.
    Gpt(sb_bench::gpt::Args),
    /// The partial FIB (cuckoo table) against rte_hash, libcuckoo, hashbrown and a concurrent map.
    Fib(sb_bench::fib::Args),
    /// Packet I/O backends forwarding between two veths.
    Io(sb_bench::io::Args),
    /// One node's engine per core: the three architectures and FIB backends (Figures 8, 9).
    Node(sb_bench::node::Args),
    /// One-way latency through a namespace cluster per architecture (Figure 10; root).
    Latency(sb_bench::latency::Args),
    /// Figures 8, 9, 10 (PNG) and cluster-tables.md from the JSON of `node` and `latency`.
    Plot(sb_bench::plot::Args),
    /// The update path: the GPT owner's updates per core and delta bytes; with `--cluster`
    /// (root), a namespace cluster's aggregate update rate and propagation times.
    Update(sb_bench::update::Args),
    /// PFCP session establishments per second of a namespace cluster (root; `smf-sim`), their
    /// latency and the memory a session costs each node.
    Pfcp(sb_bench::pfcp::Args),
    /// What a node's death costs its UEs and the updates: a namespace cluster, SIGKILL under
    /// traffic, restart (root; issue 29's failover numbers).
    Failover(sb_bench::failover::Args),
    /// The TEA switch and N memory servers over loopback UDP: Figures 9 and 10 of the TEA
    /// paper, the NF's rate with the cache against every lookup remote.
    Tea(sb_bench::tea::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Gpt(a) => sb_bench::gpt::run(a),
        Command::Fib(a) => sb_bench::fib::run(a),
        Command::Io(a) => sb_bench::io::run(a),
        Command::Node(a) => sb_bench::node::run(a),
        Command::Latency(a) => sb_bench::latency::run(a),
        Command::Plot(a) => sb_bench::plot::run(a),
        Command::Update(a) => sb_bench::update::run(a),
        Command::Pfcp(a) => sb_bench::pfcp::run(a),
        Command::Tea(a) => sb_bench::tea::run(a),
        Command::Failover(a) => sb_bench::failover::run(a),
    }
}
