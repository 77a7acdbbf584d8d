//! `scalebricks`: the node's binary. Every subcommand lives in its own module under `cmd/`; this
//! file only parses the command line and dispatches. The benchmarks are another binary,
//! `scalebricks-bench` (crate `sb-bench`), which `scalebricks bench` runs.

use clap::{Parser, Subcommand};

mod cmd;

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
    /// Benchmarks (`bench gpt|fib|io ...`): runs the scalebricks-bench binary next to this one.
    #[command(disable_help_flag = true)]
    Bench {
        /// The arguments of `scalebricks-bench`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<std::ffi::OsString>,
    },
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
    /// Send inserts, changes and deletes of flows (CSV `op,ue,teid,enb,node`) to a running
    /// cluster's control plane; exits once every one is acknowledged.
    Update(cmd::update::Args),
    /// Ask a running cluster's operator API (gRPC): stats, lookup, sessions, status.
    Ctl(cmd::ctl::Args),
    /// A PFCP load generator: an SMF establishing sessions with a running cluster as fast as
    /// it accepts them (JSON: sessions/s, latency, failures by cause).
    SmfSim(cmd::smf_sim::Args),
    /// The TEA switch of a `cluster up --arch tea` cluster (`cluster up` starts it in the
    /// switch namespace): builds the table, writes the memory servers' images, runs the NF.
    TeaSwitch(cmd::tea::SwitchArgs),
    /// A TEA memory server (`cluster up --arch tea` starts one in each node's namespace):
    /// answers the switch's reads of its part of the table.
    TeaServer(cmd::tea::ServerArgs),
    /// Add or change entries of a running `cluster up --arch tea` cluster: the switch writes
    /// them into the memory servers' tables (one-sided writes) while its lookups go on.
    TeaInsert(cmd::tea::InsertArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Gpt(c) => cmd::gpt::run(c),
        Command::Bench { args } => cmd::bench::run(args),
        Command::Cluster(c) => cmd::cluster::run(c),
        Command::Node(a) => cmd::node::run(a),
        Command::Gen(a) => cmd::gen::run(a),
        Command::Sink(a) => cmd::sink::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Update(a) => cmd::update::run(a),
        Command::Ctl(a) => cmd::ctl::run(a),
        Command::SmfSim(a) => cmd::smf_sim::run(a),
        Command::TeaSwitch(a) => cmd::tea::run_switch(a),
        Command::TeaServer(a) => cmd::tea::run_server(a),
        Command::TeaInsert(a) => cmd::tea::run_insert(a),
    }
}
