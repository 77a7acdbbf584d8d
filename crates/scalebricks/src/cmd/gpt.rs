//! `scalebricks gpt build|lookup|inspect` (being built).

#[derive(clap::Subcommand)]
pub enum GptCmd {
    /// Build a GPT from a CSV of keys and values.
    Build {},
}

pub fn run(_cmd: GptCmd) -> anyhow::Result<()> {
    anyhow::bail!("`gpt` is not built yet")
}
