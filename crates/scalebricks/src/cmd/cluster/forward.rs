//! The plain per-node forwarder (placeholder until sb-io and sb-wire are merged).

pub fn run(_dir: &std::path::Path, _node: usize) -> anyhow::Result<()> {
    anyhow::bail!("the user-space forwarder needs sb-io; use --forwarding kernel")
}
