//! `scalebricks bench_gpt` (being built; see the open issues).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`bench_gpt` is not built yet")
}
