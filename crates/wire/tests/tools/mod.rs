//! Finding the external tools (python3 with scapy, tshark) the cross-check tests run.
//! Missing tools fail the test when `CI=true`, and skip it with a notice otherwise.
#![allow(dead_code)]

use std::process::Command;

/// True when `CI` is set to `true` (or `1`).
pub fn in_ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true") | Ok("1"))
}

/// A missing tool: panic in CI, otherwise print a notice; returns `None` for the caller to skip.
pub fn missing<T>(what: &str) -> Option<T> {
    let msg = format!("{what} is not available; install it (scripts/test.sh installs tshark and python3-scapy as root)");
    if in_ci() {
        panic!("CI=true and {msg}");
    }
    eprintln!("SKIPPED: {msg}");
    None
}

/// A python interpreter that can import scapy.contrib.gtp: `$SB_PYTHON`, then `python3`, then
/// `/usr/bin/python3` (a pyenv or venv `python3` may lack the Debian python3-scapy package).
pub fn python_with_scapy() -> Option<String> {
    let mut candidates = Vec::new();
    if let Ok(p) = std::env::var("SB_PYTHON") {
        candidates.push(p);
    }
    candidates.push("python3".into());
    candidates.push("/usr/bin/python3".into());
    for c in candidates {
        let ok = Command::new(&c)
            .args(["-c", "import scapy.contrib.gtp"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            return Some(c);
        }
    }
    missing("python3 with scapy (Debian package python3-scapy)")
}

/// `tshark`, if it runs.
pub fn tshark() -> Option<String> {
    let ok = Command::new("tshark")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        Some("tshark".into())
    } else {
        missing("tshark")
    }
}
