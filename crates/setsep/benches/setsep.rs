//! Timing of build, lookups and updates (see `main`).
fn main() {}
