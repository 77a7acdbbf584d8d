//! One module per subcommand.

pub mod bench_fib;
pub mod bench_gpt;
pub mod bench_io;
pub mod bench_latency;
pub mod bench_node;
pub mod cluster;
pub mod demo;
pub mod demo_netns;
pub mod gen;
pub mod gpt;
pub mod node;
pub mod sink;
