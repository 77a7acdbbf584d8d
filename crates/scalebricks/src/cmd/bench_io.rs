//! `scalebricks bench_io` (being built; see the open issues).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`bench_io` is not built yet")
}
