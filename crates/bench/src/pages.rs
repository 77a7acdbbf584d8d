//! The page size a benchmark runs on: `--pages 2m|4k`, DPDK's EAL started to match, and the
//! measured `page_size` of every row (from `/proc/self/smaps`, never written by hand).

use sb_common::PageInfo;
#[cfg(feature = "dpdk")]
use serde_json::json;
use serde_json::Value;

/// `--pages`: what our structures (and the DPDK peers) are asked to run on.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Pages {
    /// Our arrays advised `MADV_HUGEPAGE` (libcuckoo's too); DPDK on 2 MB hugepages when they are
    /// reserved and mounted (`scripts/hugepages.sh`), else `--no-huge`.
    #[default]
    #[value(name = "2m")]
    TwoM,
    /// The control: our arrays (and libcuckoo's) `MADV_NOHUGEPAGE`, DPDK `--no-huge`.
    #[value(name = "4k")]
    FourK,
}

impl Pages {
    /// Sets the process-wide advice of `sb_common`'s arrays; call before building anything.
    pub fn apply(self) {
        sb_common::set_huge_advice(self == Pages::TwoM);
    }

    /// The name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Pages::TwoM => "2m",
            Pages::FourK => "4k",
        }
    }

    /// Starts DPDK's EAL with `mem_mb` MB on the pages this asks for (hugepages only when
    /// available); a JSON account of how it started.
    #[cfg(feature = "dpdk")]
    pub fn start_eal(self, mem_mb: u32) -> anyhow::Result<Value> {
        use sb_peers::dpdk::{eal_init_pages, EalPages};
        let want = match self {
            Pages::TwoM => EalPages::Auto,
            Pages::FourK => EalPages::NoHuge,
        };
        let st = eal_init_pages(mem_mb, want).map_err(|e| anyhow::anyhow!("DPDK EAL: {e}"))?;
        Ok(eal_json(&st))
    }
}

/// How the EAL started, as JSON (`null` when it has not).
#[cfg(feature = "dpdk")]
pub fn eal_json(st: &sb_peers::dpdk::EalStart) -> Value {
    json!({
        "hugepages": st.hugepages(),
        "huge_dir": st.huge_dir.as_ref().map(|d| d.display().to_string()),
        "mem_mb": st.mem_mb,
        "why": st.why,
    })
}

/// The EAL's start as JSON, or `null` (not started, or built without `dpdk`).
pub fn eal_started_json() -> Value {
    #[cfg(feature = "dpdk")]
    if let Some(st) = sb_peers::dpdk::eal_started() {
        return eal_json(&st);
    }
    Value::Null
}

/// `(page_size, page_detail)` of a measurement; "unmeasured" when there is none.
pub fn label(info: Option<PageInfo>) -> (String, String) {
    match info {
        Some(i) if i.bytes > 0 => (i.label(), i.detail()),
        _ => (
            "unmeasured".into(),
            "no mapping of the structure could be measured".into(),
        ),
    }
}

/// A measurement of smaps, if it could be read.
pub fn measured(r: std::io::Result<sb_common::pages::SmapsPages>) -> Option<PageInfo> {
    r.ok().map(|p| p.page_info())
}

/// What DPDK's memory sits on, measured ([`sb_peers::dpdk::memory_pages`]), with DPDK's own
/// report of its page sizes appended to the detail.
#[cfg(feature = "dpdk")]
pub fn dpdk(eal: &Value) -> (String, String) {
    match sb_peers::dpdk::memory_pages() {
        Ok((info, sizes)) => {
            let (l, d) = label(Some(info));
            let sizes: Vec<String> = sizes.iter().map(|s| format!("{} KB", s >> 10)).collect();
            let how = if eal["hugepages"].as_bool() == Some(true) {
                format!("EAL on hugepages ({})", eal["why"].as_str().unwrap_or(""))
            } else {
                format!("EAL --no-huge ({})", eal["why"].as_str().unwrap_or(""))
            };
            (
                l,
                format!("{d}; DPDK reports page size {}; {how}", sizes.join(", ")),
            )
        }
        Err(_) => label(None),
    }
}
