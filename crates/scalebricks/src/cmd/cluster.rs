//! `scalebricks cluster up|down` (being built).

#[derive(clap::Subcommand)]
pub enum ClusterCmd {
    /// Create the namespaces, bridge and veths of an N-node cluster.
    Up {},
}

pub fn run(_cmd: ClusterCmd) -> anyhow::Result<()> {
    anyhow::bail!("`cluster` is not built yet")
}
