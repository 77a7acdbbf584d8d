//! One module per subcommand.

pub mod bench;
pub mod cluster;
pub mod ctl;
pub mod demo;
pub mod demo_netns;
pub mod gen;
pub mod gpt;
pub mod node;
pub mod sink;
pub mod smf_sim;
pub mod tea;
pub mod update;
