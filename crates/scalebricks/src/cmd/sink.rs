//! `scalebricks sink` (being built; see the open issues).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`sink` is not built yet")
}
