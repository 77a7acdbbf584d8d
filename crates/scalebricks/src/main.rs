//! `scalebricks`: the one binary of the project. Every subcommand lives in its own module under
//! `cmd/`; this file only parses the command line and dispatches.

use clap::{Parser, Subcommand};

mod cmd;
// The key CSV format; parts of it (5-tuple encoding, hex output) are not used by every command.
#[allow(dead_code)]
mod keyfile;

#[derive(Parser)]
#[command(
    name = "scalebricks",
    version,
    about = "ScaleBricks: a cluster of servers acting as one network function"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build, query and inspect a Global Partition Table (SetSep).
    #[command(subcommand)]
    Gpt(cmd::gpt::GptCmd),
    /// Benchmarks: our structures and their peers side by side, JSON out.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Bring a cluster topology of network namespaces up or down.
    #[command(subcommand)]
    Cluster(cmd::cluster::ClusterCmd),
    /// Run one node of a cluster (`cluster up` starts them).
    Node(cmd::node::Args),
    /// Send downstream traffic into the running cluster.
    Gen(cmd::gen::Args),
    /// Receive and check traffic in a node's neighbour namespace (frame ring: latency without
    /// the 1 ms block timeout).
    Sink(cmd::sink::Args),
    /// The main job: a demonstration on generated keys that needs no setup.
    Demo(cmd::demo::Args),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// SetSep against DPDK EFD, sux VFunc, ptr_hash and hashbrown.
    Gpt(cmd::bench_gpt::Args),
    /// The partial FIB (cuckoo table) against rte_hash, libcuckoo, hashbrown and a concurrent map.
    Fib(cmd::bench_fib::Args),
    /// Packet I/O backends forwarding between two veths.
    Io(cmd::bench_io::Args),
    /// One node's engine per core: the three architectures and FIB backends (Figures 8, 9).
    Node(cmd::bench_node::Args),
    /// One-way latency through a namespace cluster per architecture (Figure 10; root).
    Latency(cmd::bench_latency::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Gpt(c) => cmd::gpt::run(c),
        Command::Bench(BenchCmd::Gpt(a)) => cmd::bench_gpt::run(a),
        Command::Bench(BenchCmd::Fib(a)) => cmd::bench_fib::run(a),
        Command::Bench(BenchCmd::Io(a)) => cmd::bench_io::run(a),
        Command::Bench(BenchCmd::Node(a)) => cmd::bench_node::run(a),
        Command::Bench(BenchCmd::Latency(a)) => cmd::bench_latency::run(a),
        Command::Cluster(c) => cmd::cluster::run(c),
        Command::Node(a) => cmd::node::run(a),
        Command::Gen(a) => cmd::gen::run(a),
        Command::Sink(a) => cmd::sink::run(a),
        Command::Demo(a) => cmd::demo::run(a),
    }
}
