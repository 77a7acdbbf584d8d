//! `scalebricks gen` (being built; see the open issues).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`gen` is not built yet")
}
