//! `scalebricks-bench plot`: the figures and the table of the cluster benchmarks (the paper's
//! Figures 8, 9 and 10) from the JSON that `node` and `latency` print.
//!
//! Inputs may hold one run (one JSON object), an array of runs, or several objects one after the
//! other; several files add up. Rows of the same (arch, fib, fib_entries) are reduced to their
//! median, latency rows to the median per arch. Outputs, in `--out-dir`:
//! - `fig8-node-throughput.png`: Mpps per core against FIB entries in the cluster (log x), one
//!   line per architecture x FIB backend;
//! - `fig9-node-throughput-bubble.png`: the same under the half-L3 bubble (`--node-bubble`);
//! - `fig10-latency.png`: p50 and p99 one-way latency per architecture;
//! - `cluster-tables.md`: our medians next to what the paper reports, and the ratios the project
//!   must show, each marked met or not met.
//!
//! `--lines SPEC.json` (any number; `--node` is then optional) draws other line charts from a
//! spec that names the file, the labels and the series (see [`LineSpec`]): the reproduction
//! script (`scripts/reproduce.sh`) draws Figures 7 and 11 this way from numbers it computes.
//!
//! The PNGs are drawn by plotters into a memory buffer and written with the `png` crate; the text
//! uses DejaVu Sans embedded in the binary, so no system font is needed.

use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// JSON output(s) of `scalebricks-bench node` without `--bubble` (Figure 8).
    #[arg(long, num_args = 1.., required_unless_present = "lines")]
    node: Vec<PathBuf>,
    /// JSON output(s) of `scalebricks-bench node --bubble` (Figure 9).
    #[arg(long, num_args = 1..)]
    node_bubble: Vec<PathBuf>,
    /// JSON output(s) of `scalebricks-bench node --layout per-port` (Figure 8 with the paper's
    /// node: one core per port).
    #[arg(long, num_args = 1..)]
    node_per_port: Vec<PathBuf>,
    /// JSON output(s) of `scalebricks-bench latency` (Figure 10).
    #[arg(long, num_args = 1..)]
    latency: Vec<PathBuf>,
    /// Line-chart specs (JSON, see [`LineSpec`]): one PNG each, at the spec's `file` in
    /// `--out-dir`.
    #[arg(long, num_args = 1..)]
    lines: Vec<PathBuf>,
    /// Where the PNGs and `cluster-tables.md` go.
    #[arg(long, default_value = "docs/bench")]
    out_dir: PathBuf,
}

/// Median of the node benchmark's rows of one (arch, fib, fib_entries).
#[derive(Clone, Debug, PartialEq)]
pub struct NodePoint {
    pub arch: String,
    pub fib: String,
    pub fib_entries: u64,
    pub nodes: u64,
    pub runs: usize,
    pub mpps_per_core: f64,
    /// `--layout per-port` runs: the node's rate with one core per port (NaN otherwise).
    pub mpps_per_node: f64,
    pub fib_entries_per_node: f64,
    pub fib_bytes_per_node: f64,
    pub gpt_bytes: f64,
}

/// Median of the latency benchmark's rows of one arch.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencyPoint {
    pub arch: String,
    pub runs: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
    pub max_us: f64,
    pub packets: f64,
    pub lost: f64,
}

/// The runs (top-level objects) in a JSON text: one object, an array of them, or a stream.
pub fn parse_runs(text: &str) -> Result<Vec<Value>> {
    let mut runs = Vec::new();
    for v in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
        match v.context("not JSON")? {
            Value::Array(a) => {
                for o in a {
                    if !o.is_object() {
                        bail!("expected a JSON object in the array, found {o}");
                    }
                    runs.push(o);
                }
            }
            o @ Value::Object(_) => runs.push(o),
            other => bail!("expected a JSON object or array of objects, found {other}"),
        }
    }
    Ok(runs)
}

fn load(paths: &[PathBuf]) -> Result<Vec<Value>> {
    let mut runs = Vec::new();
    for p in paths {
        let t = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        runs.extend(parse_runs(&t).with_context(|| format!("in {}", p.display()))?);
    }
    Ok(runs)
}

/// The median (the mean of the two middle values for an even count); NaN when empty.
pub fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn num(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

/// Medians per (arch, fib, fib_entries) over every row of every run, sorted by fib_entries.
pub fn node_points(runs: &[Value]) -> Result<Vec<NodePoint>> {
    type Acc = (u64, Vec<[f64; 5]>);
    let mut groups: BTreeMap<(String, String, u64), Acc> = BTreeMap::new();
    for run in runs {
        let nodes = run["nodes"]
            .as_u64()
            .context("a node run without `nodes`")?;
        let rows = run["results"]
            .as_array()
            .context("a node run without `results`")?;
        for r in rows {
            // Rows with policies (`--policy qer-urr`) are not the architectures' curves.
            if r["policy"].as_str().is_some_and(|p| p != "none") {
                continue;
            }
            let key = (
                r["arch"].as_str().context("row without arch")?.to_string(),
                r["fib"].as_str().context("row without fib")?.to_string(),
                r["fib_entries"]
                    .as_u64()
                    .context("row without fib_entries")?,
            );
            let g = groups.entry(key.clone()).or_insert((nodes, Vec::new()));
            if g.0 != nodes {
                bail!(
                    "runs of {} {} {} entries disagree on the node count ({} and {nodes})",
                    key.0,
                    key.1,
                    key.2,
                    g.0
                );
            }
            g.1.push([
                num(r, "mpps_per_core"),
                num(r, "fib_entries_per_node"),
                num(r, "fib_bytes_per_node"),
                num(r, "gpt_bytes"),
                num(r, "mpps_per_node"),
            ]);
        }
    }
    let mut out: Vec<NodePoint> = groups
        .into_iter()
        .map(|((arch, fib, fib_entries), (nodes, rows))| {
            let col = |i: usize| median(&rows.iter().map(|r| r[i]).collect::<Vec<_>>());
            NodePoint {
                arch,
                fib,
                fib_entries,
                nodes,
                runs: rows.len(),
                mpps_per_core: col(0),
                mpps_per_node: col(4),
                fib_entries_per_node: col(1),
                fib_bytes_per_node: col(2),
                gpt_bytes: col(3),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        (a.fib_entries, arch_rank(&a.arch), &a.fib).cmp(&(
            b.fib_entries,
            arch_rank(&b.arch),
            &b.fib,
        ))
    });
    Ok(out)
}

/// Medians per arch over every row of every latency run, in the order scalebricks, full-dup,
/// hash-part.
pub fn latency_points(runs: &[Value]) -> Result<Vec<LatencyPoint>> {
    let mut groups: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for run in runs {
        for r in run["results"]
            .as_array()
            .context("a latency run without `results`")?
        {
            let arch = r["arch"].as_str().context("row without arch")?.to_string();
            groups.entry(arch).or_default().push(r);
        }
    }
    let mut out: Vec<LatencyPoint> = groups
        .into_iter()
        .map(|(arch, rows)| {
            let col = |k: &str| median(&rows.iter().map(|r| num(r, k)).collect::<Vec<_>>());
            LatencyPoint {
                runs: rows.len(),
                p50_us: col("p50_us"),
                p99_us: col("p99_us"),
                mean_us: col("mean_us"),
                max_us: col("max_us"),
                packets: col("packets"),
                lost: col("lost"),
                arch,
            }
        })
        .collect();
    out.sort_by_key(|p| arch_rank(&p.arch));
    Ok(out)
}

fn arch_rank(a: &str) -> usize {
    match a {
        "scalebricks" => 0,
        "full-dup" => 1,
        "hash-part" => 2,
        _ => 3,
    }
}

fn arch_name(a: &str) -> &str {
    match a {
        "scalebricks" => "ScaleBricks",
        "full-dup" => "full duplication",
        "hash-part" => "hash partitioning",
        other => other,
    }
}

fn find<'a>(pts: &'a [NodePoint], arch: &str, fib: &str, entries: u64) -> Option<&'a NodePoint> {
    pts.iter()
        .find(|p| p.arch == arch && p.fib == fib && p.fib_entries == entries)
}

/// One row of the ratio table.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub what: String,
    /// Our value (NaN: not measured).
    pub ours: f64,
    pub target: String,
    pub paper: String,
    /// None: not measured.
    pub met: Option<bool>,
}

impl Check {
    fn new(
        what: String,
        ours: Option<f64>,
        target: &str,
        paper: &str,
        ok: fn(f64) -> bool,
    ) -> Self {
        let ours = ours.unwrap_or(f64::NAN);
        Check {
            what,
            ours,
            target: target.to_string(),
            paper: paper.to_string(),
            met: ours.is_finite().then(|| ok(ours)),
        }
    }
}

/// The sizes the throughput checks look at: 16M and 32M where measured, else the largest.
fn check_sizes(pts: &[NodePoint]) -> Vec<u64> {
    let mut measured: Vec<u64> = pts.iter().map(|p| p.fib_entries).collect();
    measured.dedup();
    let want: Vec<u64> = [16_000_000, 32_000_000]
        .into_iter()
        .filter(|s| measured.contains(s))
        .collect();
    if want.is_empty() {
        measured.last().copied().into_iter().collect()
    } else {
        want
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// The ratios the project must show, from the medians.
pub fn checks(
    node: &[NodePoint],
    bubble: &[NodePoint],
    per_port: &[NodePoint],
    lat: &[LatencyPoint],
) -> Vec<Check> {
    let mut out = Vec::new();
    for (pts, fig, paper_ck, paper_rte, metric) in [
        (
            node,
            "Fig. 8",
            "up to 1.22",
            "up to 1.20 (1.19 on the figure)",
            Metric::PerCore,
        ),
        (
            bubble,
            "Fig. 9, half L3",
            "up to 1.23",
            "up to 1.19",
            Metric::PerCore,
        ),
        (
            per_port,
            "Fig. 8, one core per port (the paper's node)",
            "up to 1.22",
            "up to 1.20 (1.19 on the figure)",
            Metric::PerNode,
        ),
    ] {
        if pts.is_empty() {
            continue;
        }
        let unit = metric.unit();
        let mpps = |pts: &[NodePoint], arch: &str, fib: &str, n: u64| {
            find(pts, arch, fib, n).map(|p| metric.of(p))
        };
        for n in check_sizes(pts) {
            let m = millions(n);
            out.push(Check::new(
                format!("{fig}: ScaleBricks / full duplication, {unit}, cuckoo, {m} entries"),
                ratio(
                    mpps(pts, "scalebricks", "cuckoo", n),
                    mpps(pts, "full-dup", "cuckoo", n),
                ),
                ">= 1.15",
                paper_ck,
                |r| r >= 1.15,
            ));
            out.push(Check::new(
                format!("{fig}: ScaleBricks / full duplication, {unit}, rte_hash, {m} entries"),
                ratio(
                    mpps(pts, "scalebricks", "rte_hash", n),
                    mpps(pts, "full-dup", "rte_hash", n),
                ),
                "> 1.0",
                paper_rte,
                |r| r > 1.0,
            ));
        }
        for arch in ["scalebricks", "full-dup", "hash-part"] {
            // The median over sizes of cuckoo / rte_hash at each size.
            let rs: Vec<f64> = sizes(pts)
                .into_iter()
                .filter_map(|n| ratio(mpps(pts, arch, "cuckoo", n), mpps(pts, arch, "rte_hash", n)))
                .collect();
            if rs.is_empty() && !pts.iter().any(|p| p.arch == arch) {
                continue;
            }
            out.push(Check::new(
                format!(
                    "{fig}: cuckoo / rte_hash, {unit}, {} (median over sizes)",
                    arch_name(arch)
                ),
                (!rs.is_empty()).then(|| median(&rs)),
                "> 1.0",
                "1.5",
                |r| r > 1.0,
            ));
        }
    }
    let p50 = |arch: &str| lat.iter().find(|p| p.arch == arch).map(|p| p.p50_us);
    if !lat.is_empty() {
        out.push(Check::new(
            "Fig. 10: hash partitioning / ScaleBricks, median latency".into(),
            ratio(p50("hash-part"), p50("scalebricks")),
            ">= 1.25",
            "1.52 (34% lower, mean latency)",
            |r| r >= 1.25,
        ));
        out.push(Check::new(
            "Fig. 10: ScaleBricks / full duplication, median latency".into(),
            ratio(p50("scalebricks"), p50("full-dup")),
            "<= 1.0",
            "0.90 (10% lower, mean latency)",
            |r| r <= 1.0,
        ));
    }
    for n in check_sizes(node) {
        for fib in fibs(node) {
            let (Some(sb), Some(fd)) = (
                find(node, "scalebricks", &fib, n),
                find(node, "full-dup", &fib, n),
            ) else {
                continue;
            };
            let share = fd.fib_bytes_per_node / sb.nodes as f64;
            out.push(Check::new(
                format!(
                    "FIB bytes per node, ScaleBricks / (full duplication / {}), {fib}, {} entries (GPT {:.1} MB more)",
                    sb.nodes,
                    millions(n),
                    sb.gpt_bytes / 1e6
                ),
                ratio(Some(sb.fib_bytes_per_node), Some(share)),
                "within 0.90-1.10",
                "FIB 75% smaller on 4 nodes",
                |r| (0.9..=1.1).contains(&r),
            ));
            out.push(Check::new(
                format!(
                    "FIB + GPT bytes per node, ScaleBricks / (full duplication / {}), {fib}, {} entries",
                    sb.nodes,
                    millions(n)
                ),
                ratio(Some(sb.fib_bytes_per_node + sb.gpt_bytes), Some(share)),
                "within 0.90-1.10",
                "-",
                |r| (0.9..=1.1).contains(&r),
            ));
        }
    }
    out
}

fn sizes(pts: &[NodePoint]) -> Vec<u64> {
    let mut v: Vec<u64> = pts.iter().map(|p| p.fib_entries).collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn fibs(pts: &[NodePoint]) -> Vec<String> {
    let mut v: Vec<String> = pts.iter().map(|p| p.fib.clone()).collect();
    v.sort_by_key(|f| (f != "cuckoo", f.clone()));
    v.dedup();
    v
}

fn series(pts: &[NodePoint]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pts
        .iter()
        .map(|p| (p.arch.clone(), p.fib.clone()))
        .collect();
    v.sort_by_key(|(a, f)| (arch_rank(a), f != "cuckoo", f.clone()));
    v.dedup();
    v
}

fn millions(n: u64) -> String {
    if n % 1_000_000 == 0 {
        format!("{}M", n / 1_000_000)
    } else if n >= 1_000_000 {
        format!("{:.1}M", n as f64 / 1e6)
    } else if n % 1000 == 0 {
        format!("{}K", n / 1000)
    } else {
        n.to_string()
    }
}

fn f(x: f64, digits: usize) -> String {
    if x.is_finite() {
        format!("{x:.digits$}")
    } else {
        "-".into()
    }
}

/// Which rate of a node row a table, figure or check reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// `mpps_per_core`: external packets per second of one core doing all of the node's work.
    PerCore,
    /// `mpps_per_node`: `--layout per-port` runs, the node's rate with one core per port.
    PerNode,
}

impl Metric {
    fn of(self, p: &NodePoint) -> f64 {
        match self {
            Metric::PerCore => p.mpps_per_core,
            Metric::PerNode => p.mpps_per_node,
        }
    }
    fn unit(self) -> &'static str {
        match self {
            Metric::PerCore => "Mpps per core",
            Metric::PerNode => "Mpps per node (2 cores)",
        }
    }
}

fn throughput_table(s: &mut String, pts: &[NodePoint], metric: Metric) {
    let ser = series(pts);
    let _ = write!(s, "| FIB entries (cluster) |");
    for (a, fb) in &ser {
        let _ = write!(s, " {} {fb} |", arch_name(a));
    }
    for fb in fibs(pts) {
        let _ = write!(s, " ScaleBricks / full dup. ({fb}) |");
    }
    s.push('\n');
    s.push_str("|---|");
    for _ in 0..ser.len() + fibs(pts).len() {
        s.push_str("---|");
    }
    s.push('\n');
    for n in sizes(pts) {
        let _ = write!(s, "| {} |", millions(n));
        for (a, fb) in &ser {
            match find(pts, a, fb, n) {
                Some(p) => {
                    let _ = write!(s, " {} ({} runs) |", f(metric.of(p), 2), p.runs);
                }
                None => s.push_str(" - |"),
            }
        }
        for fb in fibs(pts) {
            let r = ratio(
                find(pts, "scalebricks", &fb, n).map(|p| metric.of(p)),
                find(pts, "full-dup", &fb, n).map(|p| metric.of(p)),
            );
            let _ = write!(s, " {} |", r.map_or("-".into(), |r| f(r, 2)));
        }
        s.push('\n');
    }
}

fn memory_table(s: &mut String, pts: &[NodePoint]) {
    s.push_str("| FIB entries (cluster) | arch | FIB | entries per node | FIB MB per node | GPT MB |\n|---|---|---|---|---|---|\n");
    for p in pts {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            millions(p.fib_entries),
            arch_name(&p.arch),
            p.fib,
            f(p.fib_entries_per_node, 0),
            f(p.fib_bytes_per_node / 1e6, 1),
            f(p.gpt_bytes / 1e6, 2)
        );
    }
}

/// The markdown of `cluster-tables.md`.
pub fn tables(
    node: &[NodePoint],
    bubble: &[NodePoint],
    per_port: &[NodePoint],
    lat: &[LatencyPoint],
) -> String {
    let mut s = String::new();
    s.push_str("<!-- written by `scalebricks-bench plot` (scripts/bench-cluster.sh); do not edit by hand -->\n\n");
    s.push_str(PAPER_SETUP);
    let nodes = node.first().map_or(0, |p| p.nodes);
    let _ = writeln!(
        s,
        "\n### Per-node throughput (Figure 8), ours: Mpps per core, {nodes} nodes, medians\n"
    );
    throughput_table(&mut s, node, Metric::PerCore);
    s.push_str(PAPER_FIG8);
    if !per_port.is_empty() {
        s.push_str("\n### Per-node throughput with one core per port, the paper's node (Figure 8), ours: Mpps per node of 2 cores, medians\n\n");
        s.push_str(PER_PORT);
        throughput_table(&mut s, per_port, Metric::PerNode);
    }
    if !bubble.is_empty() {
        s.push_str("\n### Per-node throughput with half the L3 taken by a bubble thread (Figure 9), ours\n\n");
        throughput_table(&mut s, bubble, Metric::PerCore);
        s.push_str(PAPER_FIG9);
    }
    if !lat.is_empty() {
        s.push_str("\n### One-way latency (Figure 10), ours: medians over runs, microseconds\n\n");
        s.push_str("| arch | p50 | p99 | mean | max | packets | lost | runs |\n|---|---|---|---|---|---|---|---|\n");
        for p in lat {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                arch_name(&p.arch),
                f(p.p50_us, 1),
                f(p.p99_us, 1),
                f(p.mean_us, 1),
                f(p.max_us, 1),
                f(p.packets, 0),
                f(p.lost, 0),
                p.runs
            );
        }
        s.push_str(PAPER_FIG10);
    }
    s.push_str("\n### FIB and GPT memory per node, ours (medians)\n\n");
    memory_table(&mut s, node);
    s.push_str("\n### What the project must show\n\n| check | ours | target | paper | |\n|---|---|---|---|---|\n");
    for c in checks(node, bubble, per_port, lat) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            c.what,
            f(c.ours, 2),
            c.target,
            c.paper,
            match c.met {
                Some(true) => "met",
                Some(false) => "**not met**",
                None => "not measured",
            }
        );
    }
    s
}

const PAPER_SETUP: &str =
    "The paper's numbers below are from its text and figure labels (ScaleBricks, SIGCOMM 2015, \
sec. 6.2): **paper** = 4 dual-socket servers, 2x Intel Xeon E5-2697 v2 at 2.70 GHz, 30 MiB L3 \
each, 128 GiB DDR3, Intel 82599ES 10GbE; one core per port, downstream traffic from a Spirent \
SPT-N11U, 1M-32M static tunnels. Its Figures 8 and 9 give per-node throughput only as curves \
(the y axis spans 9-15 Mpps), so only the ratios it states are quoted. **Ours** = one engine \
core on in-memory batches (`scalebricks-bench node`), the machine in `docs/bench/cluster.md`.\n";

const PER_PORT: &str = "`scalebricks-bench node --layout per-port`: the external core runs the \
`inet` frames and the internal core the `fabric` frames, at the same time, on two pinned cores \
(the paper's node had one core per port). The node's rate is bounded by the busier core: full \
duplication's external core does every FIB lookup while its internal core only transmits; \
ScaleBricks' external core does the GPT lookups and its internal core most FIB lookups, in a \
smaller table. The paper names both effects. The table above (one core doing both) is the \
issue's measure; this one is the paper's.\n\n";

const PAPER_FIG8: &str = "\n**Paper (Fig. 8, 30 MiB L3, 4 nodes):** ScaleBricks over full \
duplication up to +22% with the optimized cuckoo table and up to +20% with rte_hash (+19% on the \
figure's label); the cuckoo table +50% over rte_hash; per-node hash table up to 75% smaller.\n";

const PAPER_FIG9: &str = "\n**Paper (Fig. 9, 15 MiB L3 left by the bubble thread):** all tables \
slower than in Fig. 8; ScaleBricks over full duplication up to +23% (cuckoo) and +19% (rte_hash).\n";

const PAPER_FIG10: &str = "\n**Paper (Fig. 10, 1M tunnels, mean latency, Spirent RFC 2544, six \
setups: rte_hash and cuckoo x three architectures, y axis 18-33 us):** ScaleBricks up to 10% \
lower than full duplication and up to 34% lower than hash partitioning. Ours runs the cuckoo FIB \
only, through namespaces and AF_PACKET (not a hardware tester), and reports percentiles.\n";

// ---------------------------------------------------------------------------------------------
// Drawing

const W: u32 = 1000;
const H: u32 = 640;

fn register_font() -> Result<()> {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font(
            "sans-serif",
            plotters::style::FontStyle::Normal,
            dejavu::sans::regular(),
        )
        .is_ok()
    });
    anyhow::ensure!(ok, "the embedded DejaVu Sans font did not load");
    Ok(())
}

fn write_png(path: &Path, rgb: &[u8]) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), W, H);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header()?;
    w.write_image_data(rgb)?;
    w.finish()?;
    Ok(())
}

fn color(arch: &str, fib: &str) -> plotters::style::RGBColor {
    use plotters::style::RGBColor;
    let dark = fib == "cuckoo";
    match (arch, dark) {
        ("scalebricks", true) => RGBColor(214, 39, 40),
        ("scalebricks", false) => RGBColor(255, 152, 150),
        ("full-dup", true) => RGBColor(31, 119, 180),
        ("full-dup", false) => RGBColor(158, 202, 225),
        ("hash-part", true) => RGBColor(44, 160, 44),
        ("hash-part", false) => RGBColor(152, 223, 138),
        _ => RGBColor(90, 90, 90),
    }
}

type DrawResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Mpps per core against FIB entries (log x), one line per arch x fib.
pub fn draw_throughput(path: &Path, title: &str, pts: &[NodePoint], metric: Metric) -> Result<()> {
    register_font()?;
    let mut buf = vec![0u8; (W * H * 3) as usize];
    draw_throughput_into(&mut buf, title, pts, metric)
        .map_err(|e| anyhow::anyhow!("drawing: {e}"))?;
    write_png(path, &buf)
}

fn draw_throughput_into(
    buf: &mut [u8],
    title: &str,
    pts: &[NodePoint],
    metric: Metric,
) -> DrawResult<()> {
    use plotters::prelude::*;
    let root = BitMapBackend::with_buffer(buf, (W, H)).into_drawing_area();
    root.fill(&WHITE)?;
    let xs = sizes(pts);
    let (x0, x1) = match (xs.first(), xs.last()) {
        (Some(&a), Some(&b)) => (a as f64 / 1.5, b as f64 * 1.5),
        _ => (1e5, 1e8),
    };
    let ymax = pts
        .iter()
        .map(|p| metric.of(p))
        .filter(|y| y.is_finite())
        .fold(0.0f64, f64::max)
        * 1.15;
    let ymax = if ymax > 0.0 { ymax } else { 1.0 };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (x0..x1)
                .log_scale()
                .with_key_points(xs.iter().map(|&x| x as f64).collect()),
            0.0..ymax,
        )?;
    chart
        .configure_mesh()
        .x_desc("FIB entries in the cluster")
        .y_desc(format!("{} (external packets)", metric.unit()))
        .x_label_formatter(&|x| millions(x.round() as u64))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;
    for (arch, fib) in series(pts) {
        let c = color(&arch, &fib);
        let line: Vec<(f64, f64)> = pts
            .iter()
            .filter(|p| p.arch == arch && p.fib == fib && metric.of(p).is_finite())
            .map(|p| (p.fib_entries as f64, metric.of(p)))
            .collect();
        chart
            .draw_series(LineSeries::new(line.clone(), c.stroke_width(3)))?
            .label(format!("{} ({fib})", arch_name(&arch)))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(3)));
        chart.draw_series(
            line.iter()
                .map(|&(x, y)| Circle::new((x, y), 4, c.filled())),
        )?;
    }
    legend(&mut chart, 16, SeriesLabelPosition::LowerLeft)?;
    root.present()?;
    Ok(())
}

/// Bars of p50 and p99 one-way latency per architecture.
pub fn draw_latency(path: &Path, pts: &[LatencyPoint]) -> Result<()> {
    register_font()?;
    let mut buf = vec![0u8; (W * H * 3) as usize];
    draw_latency_into(&mut buf, pts).map_err(|e| anyhow::anyhow!("drawing: {e}"))?;
    write_png(path, &buf)
}

fn draw_latency_into(buf: &mut [u8], pts: &[LatencyPoint]) -> DrawResult<()> {
    use plotters::prelude::*;
    let root = BitMapBackend::with_buffer(buf, (W, H)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = |f: fn(&LatencyPoint) -> f64| {
        pts.iter()
            .map(f)
            .filter(|y| y.is_finite())
            .fold(0.0f64, f64::max)
    };
    // A p99 tail far above every median would flatten the medians: such bars are cut at 5x the
    // largest median and say "off scale" beside their value.
    let ymax = top(|p| p.p99_us).min(5.0 * top(|p| p.p50_us)) * 1.2;
    let ymax = if ymax > 0.0 { ymax } else { 1.0 };
    let n = pts.len().max(1) as f64;
    let names: Vec<String> = pts.iter().map(|p| arch_name(&p.arch).to_string()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "One-way latency through the namespace cluster (Fig. 10)",
            ("sans-serif", 24),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..n, 0.0..ymax)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(pts.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 && i < names.len() {
                names[i].clone()
            } else {
                String::new()
            }
        })
        .y_desc("microseconds")
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;
    let p50c = RGBColor(31, 119, 180);
    let p99c = RGBColor(255, 127, 14);
    for (i, p) in pts.iter().enumerate() {
        let x = i as f64;
        for (lo, hi, v, c) in [
            (x + 0.15, x + 0.48, p.p50_us, p50c),
            (x + 0.52, x + 0.85, p.p99_us, p99c),
        ] {
            if !v.is_finite() {
                continue;
            }
            let (h, label) = if v > ymax {
                (ymax, format!("{v:.1} (off scale)"))
            } else {
                (v, format!("{v:.1}"))
            };
            chart.draw_series(std::iter::once(Rectangle::new(
                [(lo, 0.0), (hi, h)],
                c.filled(),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                label,
                (lo + 0.02, (h + ymax * 0.01).min(ymax * 0.96)),
                ("sans-serif", 15).into_font().color(&BLACK),
            )))?;
        }
    }
    for (label, c) in [("p50", p50c), ("p99", p99c)] {
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.filled()));
    }
    legend(&mut chart, 16, SeriesLabelPosition::UpperLeft)?;
    root.present()?;
    Ok(())
}

pub fn run(a: Args) -> Result<()> {
    let mut written = Vec::new();
    for p in &a.lines {
        let t = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let spec: LineSpec = serde_json::from_str(&t)
            .with_context(|| format!("a line-chart spec in {}", p.display()))?;
        std::fs::create_dir_all(&a.out_dir)?;
        let out = a.out_dir.join(&spec.file);
        draw_lines(&out, &spec).with_context(|| format!("drawing {}", p.display()))?;
        written.push(out);
    }
    if a.node.is_empty() {
        for p in written {
            println!("{}", p.display());
        }
        return Ok(());
    }
    let node = node_points(&load(&a.node)?)?;
    let bubble = node_points(&load(&a.node_bubble)?)?;
    let per_port = node_points(&load(&a.node_per_port)?)?;
    let lat = latency_points(&load(&a.latency)?)?;
    std::fs::create_dir_all(&a.out_dir)?;
    let nodes = node.first().map_or(0, |p| p.nodes);
    let p = a.out_dir.join("fig8-node-throughput.png");
    draw_throughput(
        &p,
        &format!("Per-node throughput, {nodes} nodes (Fig. 8)"),
        &node,
        Metric::PerCore,
    )?;
    written.push(p);
    if !per_port.is_empty() {
        let p = a.out_dir.join("fig8-node-throughput-per-port.png");
        draw_throughput(
            &p,
            &format!("Per-node throughput, one core per port, {nodes} nodes (Fig. 8)"),
            &per_port,
            Metric::PerNode,
        )?;
        written.push(p);
    }
    if !bubble.is_empty() {
        let p = a.out_dir.join("fig9-node-throughput-bubble.png");
        draw_throughput(
            &p,
            &format!("Per-node throughput, half L3 taken, {nodes} nodes (Fig. 9)"),
            &bubble,
            Metric::PerCore,
        )?;
        written.push(p);
    }
    if !lat.is_empty() {
        let p = a.out_dir.join("fig10-latency.png");
        draw_latency(&p, &lat)?;
        written.push(p);
    }
    let p = a.out_dir.join("cluster-tables.md");
    std::fs::write(&p, tables(&node, &bubble, &per_port, &lat))?;
    written.push(p);
    for p in written {
        println!("{}", p.display());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// TEA (`scalebricks-bench tea --plot DIR`): the paper's Figures 8, 9 and 10 from its JSON.

/// Draws `tea-fig8.png`, `tea-fig9.png` and `tea-fig10.png` (those whose part `v` holds) into
/// `dir`; returns the files written.
pub fn draw_tea(dir: &Path, v: &Value) -> Result<Vec<PathBuf>> {
    register_font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    let parts: [(&str, &str, TeaDraw); 3] = [
        ("figure8", "tea-fig8.png", draw_tea_fig8),
        ("figure9", "tea-fig9.png", draw_tea_fig9),
        ("figure10", "tea-fig10.png", draw_tea_fig10),
    ];
    for (key, file, draw) in parts {
        if v.get(key).is_none_or(Value::is_null) {
            continue;
        }
        let mut buf = vec![0u8; (W * H * 3) as usize];
        draw(&mut buf, &v[key]).map_err(|e| anyhow::anyhow!("drawing {file}: {e}"))?;
        let path = dir.join(file);
        write_png(&path, &buf)?;
        written.push(path);
    }
    Ok(written)
}

type TeaDraw = fn(&mut [u8], &Value) -> DrawResult<()>;

fn arr(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

fn top(ys: impl Iterator<Item = f64>) -> f64 {
    let m = ys.filter(|y| y.is_finite()).fold(0.0f64, f64::max) * 1.2;
    if m > 0.0 {
        m
    } else {
        1.0
    }
}

const TEA_COLORS: [plotters::style::RGBColor; 6] = [
    plotters::style::RGBColor(31, 119, 180),
    plotters::style::RGBColor(255, 127, 14),
    plotters::style::RGBColor(44, 160, 44),
    plotters::style::RGBColor(214, 39, 40),
    plotters::style::RGBColor(148, 103, 189),
    plotters::style::RGBColor(140, 86, 75),
];

/// Figure 8: (a) lookup latency p10/p50/p90 by frame size, and the raw read's p50; (b)
/// lookups per second by frame size. One server, no cache.
fn draw_tea_fig8(buf: &mut [u8], f: &Value) -> DrawResult<()> {
    use plotters::prelude::*;
    let root = BitMapBackend::with_buffer(buf, (W, H)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "TEA lookups, one memory server, no cache (Fig. 8)",
        ("sans-serif", 24),
    )?;
    let (left, right) = root.split_horizontally(W / 2);
    let rows = arr(&f["rows"]);
    let sizes: Vec<u64> = rows.iter().map(|r| num(r, "frame_bytes") as u64).collect();
    let n = rows.len().max(1) as f64;
    let label = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < sizes.len() {
            sizes[i as usize].to_string()
        } else {
            String::new()
        }
    };
    let q = |r: &Value, k: &str| r["latency"][k].as_f64().unwrap_or(f64::NAN);
    let raw = f["raw_read_no_packet"]["p50_us"]
        .as_f64()
        .unwrap_or(f64::NAN);
    let ymax = top(rows.iter().map(|r| q(r, "p90_us")).chain([raw]));
    let mut c = ChartBuilder::on(&left)
        .caption("(a) lookup latency", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5..n - 0.5, 0.0..ymax)?;
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(rows.len().max(1))
        .x_label_formatter(&label)
        .x_desc("frame size (B)")
        .y_desc("latency (us)")
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .draw()?;
    let blue = TEA_COLORS[0];
    let p50: Vec<(f64, f64)> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (i as f64, q(r, "p50_us")))
        .collect();
    c.draw_series(LineSeries::new(p50.clone(), blue.stroke_width(3)))?
        .label("TEA p50 (bars: p10-p90)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], blue.stroke_width(3)));
    for (i, r) in rows.iter().enumerate() {
        let x = i as f64;
        let (lo, hi) = (q(r, "p10_us"), q(r, "p90_us"));
        if lo.is_finite() && hi.is_finite() {
            c.draw_series(LineSeries::new(
                vec![(x, lo), (x, hi)],
                blue.stroke_width(2),
            ))?;
            for y in [lo, hi] {
                c.draw_series(LineSeries::new(
                    vec![(x - 0.12, y), (x + 0.12, y)],
                    blue.stroke_width(2),
                ))?;
            }
        }
    }
    if raw.is_finite() {
        let red = TEA_COLORS[3];
        c.draw_series(LineSeries::new(
            vec![(-0.5, raw), (n - 0.5, raw)],
            red.stroke_width(2),
        ))?
        .label("raw read, no packet (p50)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], red.stroke_width(2)));
    }
    legend(&mut c, 14, SeriesLabelPosition::UpperRight)?;
    let rate: Vec<(f64, f64)> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (i as f64, num(r, "lookups_per_s") / 1e6))
        .collect();
    let ymax = top(rate.iter().map(|p| p.1));
    let mut c = ChartBuilder::on(&right)
        .caption("(b) lookup throughput", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5..n - 0.5, 0.0..ymax)?;
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(rows.len().max(1))
        .x_label_formatter(&label)
        .x_desc("frame size (B)")
        .y_desc("million lookups/s")
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .draw()?;
    c.draw_series(
        rate.iter()
            .map(|&(x, y)| Rectangle::new([(x - 0.3, 0.0), (x + 0.3, y)], TEA_COLORS[0].filled())),
    )?;
    root.present()?;
    Ok(())
}

/// Figure 9: (a) lookups per second per server at the largest server count, without the
/// cache at each α and with it at the largest; (b) aggregate lookups per second by server
/// count, per α, with and without the cache.
fn draw_tea_fig9(buf: &mut [u8], f: &Value) -> DrawResult<()> {
    use plotters::prelude::*;
    let root = BitMapBackend::with_buffer(buf, (W, H)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "TEA lookups over several memory servers, Zipf keys (Fig. 9)",
        ("sans-serif", 24),
    )?;
    let (left, right) = root.split_horizontally(W / 2);
    let rows = arr(f);
    let max_n = rows
        .iter()
        .map(|r| num(r, "servers") as u64)
        .max()
        .unwrap_or(1);
    let mut alphas: Vec<f64> = rows.iter().map(|r| num(r, "alpha")).collect();
    alphas.sort_by(f64::total_cmp);
    alphas.dedup();
    let last = alphas.last().copied().unwrap_or(f64::NAN);
    let at = |alpha: f64, n: u64, cache: bool| {
        rows.iter().find(|r| {
            num(r, "alpha") == alpha
                && num(r, "servers") as u64 == n
                && r["cache"].as_bool() == Some(cache)
        })
    };
    // (a)
    let mut series: Vec<(String, Vec<f64>)> = Vec::new();
    for &al in &alphas {
        if let Some(r) = at(al, max_n, false) {
            series.push((format!("a={al:.2} w/o cache"), per_server(r)));
        }
    }
    if let Some(r) = at(last, max_n, true) {
        let share = num(r, "cache_share") * 100.0;
        series.push((
            format!("a={last:.2} w/ cache ({share:.0}% from cache)"),
            per_server(r),
        ));
    }
    let ymax = top(series.iter().flat_map(|s| s.1.iter().copied()));
    let mut c = ChartBuilder::on(&left)
        .caption(
            format!("(a) per server, {max_n} servers"),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(0.5..max_n as f64 + 0.5, 0.0..ymax)?;
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(max_n as usize)
        .x_label_formatter(&|x| format!("{:.0}", x))
        .x_desc("server ID")
        .y_desc("million lookups/s")
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .draw()?;
    for (k, (name, ys)) in series.iter().enumerate() {
        let col = TEA_COLORS[k % TEA_COLORS.len()];
        let pts: Vec<(f64, f64)> = ys
            .iter()
            .enumerate()
            .map(|(i, &y)| (i as f64 + 1.0, y))
            .collect();
        c.draw_series(LineSeries::new(pts.clone(), col.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], col.stroke_width(2)));
        c.draw_series(pts.iter().map(|&p| Circle::new(p, 4, col.filled())))?;
    }
    legend(&mut c, 13, SeriesLabelPosition::LowerLeft)?;
    // (b)
    let mut ns: Vec<u64> = rows.iter().map(|r| num(r, "servers") as u64).collect();
    ns.sort_unstable();
    ns.dedup();
    // (label, points, with the cache)
    type Line = (String, Vec<(f64, f64)>, bool);
    let mut lines: Vec<Line> = Vec::new();
    for &al in &alphas {
        for cache in [false, true] {
            let pts: Vec<(f64, f64)> = ns
                .iter()
                .enumerate()
                .filter_map(|(i, &n)| {
                    at(al, n, cache).map(|r| (i as f64, num(r, "aggregate_lookups_per_s") / 1e6))
                })
                .collect();
            let name = format!("a={al:.2} {}", if cache { "w/ cache" } else { "w/o cache" });
            lines.push((name, pts, cache));
        }
    }
    let ymax = top(lines.iter().flat_map(|l| l.1.iter().map(|p| p.1)));
    let nx = ns.len().max(1) as f64;
    let mut c = ChartBuilder::on(&right)
        .caption("(b) aggregate remote lookups", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.3..nx - 0.7, 0.0..ymax)?;
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(ns.len().max(1))
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < ns.len() {
                ns[i as usize].to_string()
            } else {
                String::new()
            }
        })
        .x_desc("memory servers")
        .y_desc("million lookups/s (reads sent)")
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .draw()?;
    for (k, (name, pts, cache)) in lines.iter().enumerate() {
        let col = TEA_COLORS[(k / 2) % TEA_COLORS.len()];
        let style = if *cache {
            col.stroke_width(3)
        } else {
            col.mix(0.5).stroke_width(2)
        };
        c.draw_series(LineSeries::new(pts.clone(), style))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
        c.draw_series(pts.iter().map(|&p| Circle::new(p, 3, col.filled())))?;
    }
    legend(&mut c, 13, SeriesLabelPosition::LowerRight)?;
    root.present()?;
    Ok(())
}

fn per_server(r: &Value) -> Vec<f64> {
    arr(&r["lookups_per_server_per_s"])
        .iter()
        .map(|x| x.as_f64().unwrap_or(0.0) / 1e6)
        .collect()
}

/// Figure 10: the NF's output rate and each server's reads per bin through the primary's
/// overload and failure.
fn draw_tea_fig10(buf: &mut [u8], f: &Value) -> DrawResult<()> {
    use plotters::prelude::*;
    let root = BitMapBackend::with_buffer(buf, (W, H)).into_drawing_area();
    root.fill(&WHITE)?;
    let bin_s = num(f, "bin_ms") / 1000.0;
    let rate: Vec<f64> = arr(&f["rate_pps"])
        .iter()
        .map(|x| x.as_f64().unwrap_or(0.0) / 1e3)
        .collect();
    let reads = arr(&f["reads_per_server_per_bin"]);
    let per = |s: usize| -> Vec<(f64, f64)> {
        reads
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let x = r[s].as_f64().unwrap_or(0.0) / bin_s / 1e3;
                ((i as f64 + 1.0) * bin_s, x)
            })
            .collect()
    };
    let tmax = rate.len() as f64 * bin_s;
    let ymax = top(rate
        .iter()
        .copied()
        .chain(per(0).iter().chain(&per(1)).map(|p| p.1)));
    let mut c = ChartBuilder::on(&root)
        .caption(
            "TEA through an overload and a failure of the primary (Fig. 10)",
            ("sans-serif", 24),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..tmax.max(bin_s), 0.0..ymax)?;
    c.configure_mesh()
        .x_desc(format!("time (s), {} ms bins", num(f, "bin_ms")))
        .y_desc("thousand per second")
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;
    let pts: Vec<(f64, f64)> = rate
        .iter()
        .enumerate()
        .map(|(i, &y)| ((i as f64 + 1.0) * bin_s, y))
        .collect();
    let black = RGBColor(30, 30, 30);
    c.draw_series(LineSeries::new(pts, black.stroke_width(3)))?
        .label("NF packets out")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], black.stroke_width(3)));
    for (s, name) in [
        (0, "reads to server 1 (primary)"),
        (1, "reads to server 2 (secondary)"),
    ] {
        let col = TEA_COLORS[s];
        c.draw_series(LineSeries::new(per(s), col.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], col.stroke_width(2)));
    }
    for e in arr(&f["events"]) {
        let t = num(e, "t_s");
        let grey = RGBColor(150, 150, 150);
        c.draw_series(LineSeries::new(
            vec![(t, 0.0), (t, ymax)],
            grey.stroke_width(1),
        ))?;
        c.draw_series(std::iter::once(Text::new(
            e["what"].as_str().unwrap_or("").to_string(),
            (t + 0.03, ymax * 0.97),
            ("sans-serif", 14).into_font().color(&grey),
        )))?;
    }
    legend(&mut c, 15, SeriesLabelPosition::LowerLeft)?;
    root.present()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Line charts from a spec (`--lines`).

/// A line chart: log-scaled x axis, linear y axis from 0, one line with markers per series.
#[derive(serde::Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LineSpec {
    /// File name of the PNG (in `--out-dir`); must be a plain name ending in `.png`.
    pub file: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Where the x axis is labelled (default: every distinct x of the series).
    #[serde(default)]
    pub x_ticks: Vec<f64>,
    pub series: Vec<LineSeriesSpec>,
}

/// One line of a [`LineSpec`].
#[derive(serde::Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LineSeriesSpec {
    pub name: String,
    /// (x, y) points; x must be positive (log axis); non-finite y are skipped.
    pub points: Vec<(f64, f64)>,
    /// Thin line without markers (a formula or the paper's numbers).
    #[serde(default)]
    pub thin: bool,
}

/// Draws `spec` into the PNG `path`.
pub fn draw_lines(path: &Path, spec: &LineSpec) -> Result<()> {
    anyhow::ensure!(
        spec.file.ends_with(".png") && !spec.file.contains('/') && !spec.file.starts_with('.'),
        "the spec's file must be a plain name ending in .png, got {:?}",
        spec.file
    );
    anyhow::ensure!(!spec.series.is_empty(), "the spec has no series");
    for s in &spec.series {
        anyhow::ensure!(
            s.points.iter().all(|&(x, _)| x.is_finite() && x > 0.0),
            "series {:?}: x must be positive and finite (log axis)",
            s.name
        );
    }
    register_font()?;
    let mut buf = vec![0u8; (W * H * 3) as usize];
    draw_lines_into(&mut buf, spec).map_err(|e| anyhow::anyhow!("drawing: {e}"))?;
    write_png(path, &buf)
}

/// An x value as an axis label: 500K, 1M, 32, 0.5.
fn short_number(x: f64) -> String {
    if x >= 1000.0 && x.fract() == 0.0 {
        millions(x as u64)
    } else if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

fn draw_lines_into(buf: &mut [u8], spec: &LineSpec) -> DrawResult<()> {
    use plotters::prelude::*;
    let root = BitMapBackend::with_buffer(buf, (W, H)).into_drawing_area();
    root.fill(&WHITE)?;
    let pts = || spec.series.iter().flat_map(|s| s.points.iter());
    let x0 = pts().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x1 = pts().map(|p| p.0).fold(0.0f64, f64::max);
    let (x0, x1) = if x0.is_finite() && x1 > 0.0 {
        (x0 / 1.3, x1 * 1.3)
    } else {
        (0.5, 2.0)
    };
    let ymax = top(pts().map(|p| p.1)) / 1.2 * 1.15;
    let mut ticks = if spec.x_ticks.is_empty() {
        pts().map(|p| p.0).collect::<Vec<_>>()
    } else {
        spec.x_ticks.clone()
    };
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    let mut chart = ChartBuilder::on(&root)
        .caption(&spec.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d((x0..x1).log_scale().with_key_points(ticks), 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc(spec.x_label.as_str())
        .y_desc(spec.y_label.as_str())
        .x_label_formatter(&|x| short_number(*x))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;
    for (i, s) in spec.series.iter().enumerate() {
        let c = TEA_COLORS[i % TEA_COLORS.len()];
        let line: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|p| p.1.is_finite())
            .collect();
        let w = if s.thin { 1 } else { 3 };
        chart
            .draw_series(LineSeries::new(line.clone(), c.stroke_width(w)))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(w)));
        if !s.thin {
            chart.draw_series(
                line.iter()
                    .map(|&(x, y)| Circle::new((x, y), 4, c.filled())),
            )?;
        }
    }
    legend(&mut chart, 15, SeriesLabelPosition::UpperLeft)?;
    root.present()?;
    Ok(())
}

/// The charts' legend box: white, framed, `font`-point labels at `pos`.
fn legend<'a, DB: plotters::prelude::DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut plotters::chart::ChartContext<'a, DB, CT>,
    font: u32,
    pos: plotters::chart::SeriesLabelPosition,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    use plotters::prelude::*;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", font))
        .position(pos)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two runs of 4 nodes (one as an array, one as a second object in the stream), and a third
    /// run of ScaleBricks/cuckoo at 16M only.
    const NODE: &str = r#"
    [{"benchmark":"node","nodes":4,"results":[
      {"arch":"scalebricks","fib":"cuckoo","fib_entries":16000000,"mpps_per_core":12.0,"fib_entries_per_node":4000000,"fib_bytes_per_node":26000000,"gpt_bytes":7000000},
      {"arch":"full-dup","fib":"cuckoo","fib_entries":16000000,"mpps_per_core":10.0,"fib_entries_per_node":16000000,"fib_bytes_per_node":100000000,"gpt_bytes":0},
      {"arch":"scalebricks","fib":"rte_hash","fib_entries":16000000,"mpps_per_core":7.0,"fib_entries_per_node":4000000,"fib_bytes_per_node":40000000,"gpt_bytes":7000000},
      {"arch":"full-dup","fib":"rte_hash","fib_entries":16000000,"mpps_per_core":7.5,"fib_entries_per_node":16000000,"fib_bytes_per_node":160000000,"gpt_bytes":0}
    ]}]
    {"benchmark":"node","nodes":4,"results":[
      {"arch":"scalebricks","fib":"cuckoo","fib_entries":16000000,"mpps_per_core":14.0,"fib_entries_per_node":4000000,"fib_bytes_per_node":26000000,"gpt_bytes":7000000},
      {"arch":"full-dup","fib":"cuckoo","fib_entries":16000000,"mpps_per_core":11.0,"fib_entries_per_node":16000000,"fib_bytes_per_node":100000000,"gpt_bytes":0},
      {"arch":"scalebricks","fib":"cuckoo","fib_entries":1000000,"mpps_per_core":20.0,"fib_entries_per_node":250000,"fib_bytes_per_node":2000000,"gpt_bytes":500000}
    ]}
    {"benchmark":"node","nodes":4,"results":[
      {"arch":"scalebricks","fib":"cuckoo","fib_entries":16000000,"mpps_per_core":100.0,"fib_entries_per_node":4000000,"fib_bytes_per_node":26000000,"gpt_bytes":7000000}
    ]}"#;

    const LAT: &str = r#"{"benchmark":"latency","results":[
      {"arch":"full-dup","p50_us":20.0,"p99_us":40.0,"mean_us":21.0,"max_us":90.0,"packets":500,"lost":0,"duplicates":0},
      {"arch":"scalebricks","p50_us":19.0,"p99_us":35.0,"mean_us":20.0,"max_us":80.0,"packets":500,"lost":1,"duplicates":0},
      {"arch":"hash-part","p50_us":30.0,"p99_us":50.0,"mean_us":31.0,"max_us":99.0,"packets":500,"lost":0,"duplicates":0}]}
    {"benchmark":"latency","results":[
      {"arch":"scalebricks","p50_us":21.0,"p99_us":37.0,"mean_us":22.0,"max_us":70.0,"packets":500,"lost":3,"duplicates":0}]}"#;

    #[test]
    fn medians() {
        assert!(median(&[]).is_nan());
        assert_eq!(median(&[3.0]), 3.0);
        assert_eq!(median(&[5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[1.0, f64::NAN, 2.0]), 1.5);
    }

    #[test]
    fn parses_objects_arrays_and_streams() {
        assert_eq!(parse_runs(NODE).unwrap().len(), 3);
        assert_eq!(parse_runs(LAT).unwrap().len(), 2);
        assert!(parse_runs("[1]").is_err());
        assert!(parse_runs("{").is_err());
    }

    #[test]
    fn node_medians_per_arch_fib_size() {
        let pts = node_points(&parse_runs(NODE).unwrap()).unwrap();
        assert_eq!(pts.len(), 5);
        // Sorted by size, then scalebricks before full-dup, then fib name.
        assert_eq!(pts[0].fib_entries, 1_000_000);
        let sb = find(&pts, "scalebricks", "cuckoo", 16_000_000).unwrap();
        assert_eq!((sb.runs, sb.mpps_per_core), (3, 14.0)); // median of 12, 14, 100
        let fd = find(&pts, "full-dup", "cuckoo", 16_000_000).unwrap();
        assert_eq!((fd.runs, fd.mpps_per_core), (2, 10.5));
        assert_eq!(fd.nodes, 4);
        assert_eq!(pts[1].arch, "scalebricks");
    }

    #[test]
    fn node_runs_with_different_node_counts_are_refused() {
        let t = r#"{"nodes":4,"results":[{"arch":"scalebricks","fib":"cuckoo","fib_entries":1000,"mpps_per_core":1.0}]}
                   {"nodes":8,"results":[{"arch":"scalebricks","fib":"cuckoo","fib_entries":1000,"mpps_per_core":1.0}]}"#;
        assert!(node_points(&parse_runs(t).unwrap()).is_err());
    }

    #[test]
    fn latency_medians_per_arch_in_order() {
        let pts = latency_points(&parse_runs(LAT).unwrap()).unwrap();
        let archs: Vec<&str> = pts.iter().map(|p| p.arch.as_str()).collect();
        assert_eq!(archs, ["scalebricks", "full-dup", "hash-part"]);
        assert_eq!((pts[0].runs, pts[0].p50_us, pts[0].lost), (2, 20.0, 2.0));
    }

    fn check<'a>(cs: &'a [Check], what: &str) -> &'a Check {
        cs.iter()
            .find(|c| c.what.contains(what))
            .unwrap_or_else(|| panic!("no check {what:?} in {cs:#?}"))
    }

    #[test]
    fn ratios_and_verdicts() {
        let node = node_points(&parse_runs(NODE).unwrap()).unwrap();
        let lat = latency_points(&parse_runs(LAT).unwrap()).unwrap();
        let cs = checks(&node, &[], &[], &lat);
        // 16M is measured, 32M is not: only 16M rows.
        assert!(!cs.iter().any(|c| c.what.contains("32M")));
        let c = check(
            &cs,
            "Fig. 8: ScaleBricks / full duplication, Mpps per core, cuckoo, 16M",
        );
        assert!((c.ours - 14.0 / 10.5).abs() < 1e-12);
        assert_eq!(c.met, Some(true));
        let c = check(&cs, "rte_hash, 16M");
        assert!((c.ours - 7.0 / 7.5).abs() < 1e-12);
        assert_eq!(c.met, Some(false));
        let c = check(&cs, "cuckoo / rte_hash, Mpps per core, ScaleBricks");
        assert!((c.ours - 2.0).abs() < 1e-12);
        assert_eq!(c.met, Some(true));
        // Above rte_hash is the target (the paper's 1.5 is quoted beside it).
        let c = check(&cs, "cuckoo / rte_hash, Mpps per core, full duplication");
        assert!((c.ours - 10.5 / 7.5).abs() < 1e-12);
        assert_eq!(c.met, Some(true));
        // No hash-partitioning node rows: no such check.
        assert!(!cs
            .iter()
            .any(|c| c.what.contains("rte_hash, Mpps per core, hash")));
        let c = check(&cs, "hash partitioning / ScaleBricks");
        assert!((c.ours - 1.5).abs() < 1e-12);
        assert_eq!(c.met, Some(true));
        let c = check(&cs, "ScaleBricks / full duplication, median latency");
        assert_eq!((c.ours, c.met), (1.0, Some(true)));
        // 26 MB against 100 MB / 4 = 25 MB: 1.04, within 10%; rte_hash 40 / 40.
        let c = check(
            &cs,
            "FIB bytes per node, ScaleBricks / (full duplication / 4), cuckoo",
        );
        assert!((c.ours - 1.04).abs() < 1e-12);
        assert_eq!(c.met, Some(true));
        // With the GPT: (26 + 7) / 25 = 1.32, not within 10%.
        let c = check(
            &cs,
            "FIB + GPT bytes per node, ScaleBricks / (full duplication / 4), cuckoo",
        );
        assert!((c.ours - 1.32).abs() < 1e-12);
        assert_eq!(c.met, Some(false));
        let c = check(
            &cs,
            "FIB bytes per node, ScaleBricks / (full duplication / 4), rte_hash",
        );
        assert_eq!(c.met, Some(true));
    }

    #[test]
    fn per_port_runs_are_checked_on_the_node_rate() {
        let t = r#"{"nodes":4,"layout":"per-port","results":[
          {"arch":"scalebricks","fib":"cuckoo","fib_entries":16000000,"mpps_per_core":4.0,"mpps_per_node":6.0},
          {"arch":"full-dup","fib":"cuckoo","fib_entries":16000000,"mpps_per_core":5.0,"mpps_per_node":5.0}]}"#;
        let pp = node_points(&parse_runs(t).unwrap()).unwrap();
        assert_eq!(pp[0].mpps_per_node, 6.0);
        let cs = checks(&[], &[], &pp, &[]);
        let c = check(
            &cs,
            "one core per port (the paper's node): ScaleBricks / full duplication, Mpps per node (2 cores), cuckoo, 16M",
        );
        assert!((c.ours - 1.2).abs() < 1e-12);
        assert_eq!(c.met, Some(true));
        let md = tables(&[], &[], &pp, &[]);
        assert!(md.contains("one core per port"));
        assert!(md.contains("| 16M | 6.00 (1 runs) |"), "{md}");
    }

    #[test]
    fn missing_sizes_fall_back_to_the_largest_and_say_not_measured() {
        let t = r#"{"nodes":4,"results":[
          {"arch":"scalebricks","fib":"cuckoo","fib_entries":100000,"mpps_per_core":9.0},
          {"arch":"full-dup","fib":"cuckoo","fib_entries":100000,"mpps_per_core":10.0},
          {"arch":"full-dup","fib":"cuckoo","fib_entries":200000,"mpps_per_core":8.0}]}"#;
        let node = node_points(&parse_runs(t).unwrap()).unwrap();
        let cs = checks(&node, &[], &[], &[]);
        let c = check(&cs, "cuckoo, 200K");
        assert_eq!(c.met, None);
        assert!(c.ours.is_nan());
        let md = tables(&node, &[], &[], &[]);
        assert!(md.contains("not measured"));
        assert!(
            md.contains("| 100K | 9.00 (1 runs) | 10.00 (1 runs) | 0.90 |"),
            "{md}"
        );
    }

    #[test]
    fn table_names_the_paper_and_the_verdicts() {
        let node = node_points(&parse_runs(NODE).unwrap()).unwrap();
        let lat = latency_points(&parse_runs(LAT).unwrap()).unwrap();
        let md = tables(&node, &node, &[], &lat);
        assert!(md.contains("Xeon E5-2697 v2"));
        assert!(md.contains("**Paper (Fig. 8"));
        assert!(md.contains("**Paper (Fig. 9"));
        assert!(md.contains("**Paper (Fig. 10"));
        assert!(md.contains("| 16M | 14.00 (3 runs) | 7.00 (1 runs) | 10.50 (2 runs) | 7.50 (1 runs) | 1.33 | 0.93 |"), "{md}");
        assert!(md.contains("| met |"));
        assert!(md.contains("| **not met** |"));
        assert!(md.contains("| ScaleBricks | 20.0 | 36.0 |"), "{md}");
    }

    #[test]
    fn line_specs_are_drawn_and_checked() {
        let t = r#"{"file":"f.png","title":"t","x_label":"x","y_label":"y","x_ticks":[1,2,4],
          "series":[{"name":"a","points":[[1,2.0],[2,3.5],[4,1.0]]},
                    {"name":"b","points":[[1,1],[4,2]],"thin":true}]}"#;
        let spec: LineSpec = serde_json::from_str(t).expect("spec");
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("f.png");
        draw_lines(&p, &spec).expect("drawn");
        let d = png::Decoder::new(std::fs::File::open(&p).expect("open"));
        let r = d.read_info().expect("a PNG");
        assert_eq!((r.info().width, r.info().height), (W, H));
        // A path in `file`, x not positive, no series, unknown fields: refused.
        let mut bad = spec.clone();
        bad.file = "../f.png".into();
        assert!(draw_lines(&p, &bad).is_err());
        let mut bad = spec.clone();
        bad.series[0].points[0].0 = 0.0;
        assert!(draw_lines(&p, &bad).is_err());
        let mut bad = spec;
        bad.series.clear();
        assert!(draw_lines(&p, &bad).is_err());
        assert!(serde_json::from_str::<LineSpec>(&t.replace("\"thin\"", "\"thick\"")).is_err());
        assert_eq!(short_number(500_000.0), "500K");
        assert_eq!(short_number(32.0), "32");
    }

    #[test]
    fn writes_pngs() {
        let node = node_points(&parse_runs(NODE).unwrap()).unwrap();
        let lat = latency_points(&parse_runs(LAT).unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.png");
        draw_throughput(&p, "test", &node, Metric::PerCore).unwrap();
        let b = std::fs::read(&p).unwrap();
        assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
        let p = dir.path().join("l.png");
        draw_latency(&p, &lat).unwrap();
        assert_eq!(&std::fs::read(&p).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
    }

    /// The TEA figures from a JSON of the shape `bench tea` prints: three PNGs written.
    #[test]
    fn tea_figures_are_drawn() {
        let row = |alpha: f64, n: u64, cache: bool| {
            serde_json::json!({"alpha": alpha, "servers": n, "cache": cache,
                "cache_share": if cache { 0.5 } else { 0.0 },
                "aggregate_lookups_per_s": 1e5 * n as f64,
                "lookups_per_server_per_s": vec![1e5; n as usize]})
        };
        let rows: Vec<Value> = [64, 1500]
            .iter()
            .map(|s| {
                serde_json::json!({"frame_bytes": s,
                    "latency": {"p10_us": 10.0, "p50_us": 12.0, "p90_us": 20.0},
                    "lookups_per_s": 1e5})
            })
            .collect();
        let v = serde_json::json!({
            "figure8": {"rows": rows, "raw_read_no_packet": {"p50_us": 8.0}},
            "figure9": [row(0.9, 1, false), row(0.99, 2, true), row(0.99, 2, false)],
            "figure10": {"bin_ms": 50, "rate_pps": [1e5, 0.0, 9e4],
                "reads_per_server_per_bin": [[5000, 0], [0, 0], [0, 4500]],
                "events": [{"t_s": 0.05, "what": "primary down"}]},
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let files = draw_tea(dir.path(), &v).expect("drawn");
        assert_eq!(files.len(), 3);
        for f in files {
            let d = png::Decoder::new(std::fs::File::open(&f).expect("open"));
            let r = d.read_info().expect("a PNG");
            assert_eq!((r.info().width, r.info().height), (W, H));
        }
        // A part not run is not drawn.
        let only = serde_json::json!({"figure8": v["figure8"].clone(), "figure9": null});
        assert_eq!(draw_tea(dir.path(), &only).expect("drawn").len(), 1);
    }
}
