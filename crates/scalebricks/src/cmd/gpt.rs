//! `scalebricks gpt build|lookup|inspect`: build a Global Partition Table (SetSep) from a CSV of
//! keys and values, query it, and describe it. The CSV format is [`sb_traffic::keys`]'.
//!
//! A failed build leaves no output file behind: the table is written to a temporary file in the
//! output's directory and renamed over the output only once it is complete.

use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use sb_setsep::{BuildOptions, Config, SetSep};

use sb_traffic::keys::{KeyFileError, Reader, Table};

/// Builds smaller than this many keys show no progress bar.
const PROGRESS_MIN_KEYS: usize = 1 << 20;
/// Keys looked up per batch by `gpt lookup`.
const LOOKUP_BATCH: usize = 1024;

#[derive(clap::Subcommand)]
pub enum GptCmd {
    /// Build a GPT from a CSV of keys and values.
    Build {
        /// CSV of `key,value` (key: IPv4, IPv6 or 0x hex) or `proto,src_ip,src_port,dst_ip,dst_port,value`.
        #[arg(long)]
        input: PathBuf,
        /// Bits of each value (1 to 16).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=16))]
        value_bits: u32,
        /// SetSep configuration: hash-index bits + bit-array bits per group (16+8, 8+16, 16+16).
        #[arg(long, default_value = "16+8")]
        config: Config,
        /// Build threads (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Seed of the build's randomized choices (same seed, same table).
        #[arg(long)]
        seed: Option<u64>,
        /// The table file to write.
        #[arg(long)]
        output: PathBuf,
    },
    /// Look up every key of a CSV; prints `key,value` per key, the key as written.
    Lookup {
        /// The table file.
        file: PathBuf,
        /// CSV of keys (a value column, if present, is ignored).
        #[arg(long)]
        input: PathBuf,
    },
    /// Describe a table file: keys, value bits, configuration, space, fallback keys.
    Inspect {
        /// The table file.
        file: PathBuf,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: GptCmd) -> anyhow::Result<()> {
    match cmd {
        GptCmd::Build {
            input,
            value_bits,
            config,
            threads,
            seed,
            output,
        } => build(&input, value_bits, config, threads, seed, &output),
        GptCmd::Lookup { file, input } => lookup(&file, &input),
        GptCmd::Inspect { file, json } => inspect(&file, json),
    }
}

fn build(
    input: &Path,
    value_bits: u32,
    config: Config,
    threads: Option<usize>,
    seed: Option<u64>,
    output: &Path,
) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let table = Table::read(input, value_bits)?;
    let keys = table.keys();
    let threads = match threads {
        Some(0) => bail!("--threads must be at least 1"),
        Some(t) => t,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut opts = BuildOptions {
        config,
        value_bits: value_bits as u8,
        threads,
        ..BuildOptions::default()
    };
    if let Some(s) = seed {
        // Same seed, same table: the build id (in the image) is fixed by the seed too.
        opts.seed = s;
        opts.build_id = s;
    }
    eprintln!(
        "read {} keys from {} in {:.2}s; building {} with {} thread(s)",
        keys.len(),
        input.display(),
        t0.elapsed().as_secs_f64(),
        config,
        threads
    );
    let t1 = Instant::now();
    let gpt = if keys.len() >= PROGRESS_MIN_KEYS && std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(sb_setsep::num_blocks(keys.len() as u64));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} blocks ({per_sec}, eta {eta})",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        let b = bar.clone();
        let r =
            SetSep::build_with_progress(&keys, &table.values, &opts, &move |more: u64| b.inc(more));
        bar.finish_and_clear();
        r
    } else {
        SetSep::build(&keys, &table.values, &opts)
    }
    .with_context(|| format!("building the GPT from {}", input.display()))?;
    let build_s = t1.elapsed().as_secs_f64();

    // Check every key before writing: a table that answers wrong is never written.
    let mut got = vec![0u16; keys.len()];
    gpt.lookup_batch(&keys, &mut got);
    if let Some(i) = (0..keys.len()).find(|&i| got[i] != table.values[i]) {
        bail!(
            "internal error: the built table answers {} for the key on line {} (expected {})",
            got[i],
            table.lines[i],
            table.values[i]
        );
    }

    write_atomically(output, |w| gpt.write_to(w).map_err(anyhow::Error::from))?;
    let s = gpt.stats();
    eprintln!(
        "built {} keys in {:.2}s ({:.2} M keys/s): {:.3} bits/key, {} fallback keys, {} bytes -> {}",
        keys.len(),
        build_s,
        keys.len() as f64 / build_s.max(1e-9) / 1e6,
        s.bits_per_key,
        s.fallback_keys,
        s.bytes,
        output.display()
    );
    Ok(())
}

/// Writes `output` through a temporary file in its directory, renamed over it on success; on
/// any error nothing is left behind.
fn write_atomically(
    output: &Path,
    f: impl FnOnce(&mut BufWriter<&mut std::fs::File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let dir = match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".gpt-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    {
        let mut w = BufWriter::new(tmp.as_file_mut());
        f(&mut w).with_context(|| format!("writing {}", output.display()))?;
        w.flush()
            .with_context(|| format!("writing {}", output.display()))?;
    }
    tmp.as_file()
        .sync_all()
        .with_context(|| format!("writing {}", output.display()))?;
    tmp.persist(output)
        .with_context(|| format!("renaming the table onto {}", output.display()))?;
    Ok(())
}

/// Loads and validates a table file.
pub fn load(file: &Path) -> anyhow::Result<SetSep> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    SetSep::from_bytes(&bytes).with_context(|| format!("{}: not a valid GPT file", file.display()))
}

fn lookup(file: &Path, input: &Path) -> anyhow::Result<()> {
    let gpt = load(file)?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut texts: Vec<String> = Vec::with_capacity(LOOKUP_BATCH);
    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(LOOKUP_BATCH);
    let mut vals = vec![0u16; LOOKUP_BATCH];
    let mut flush = |texts: &mut Vec<String>,
                     keys: &mut Vec<Vec<u8>>,
                     out: &mut BufWriter<std::io::StdoutLock<'_>>|
     -> std::io::Result<()> {
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        gpt.lookup_batch(&refs, &mut vals[..refs.len()]);
        for (t, v) in texts.iter().zip(&vals) {
            writeln!(out, "{t},{v}")?;
        }
        texts.clear();
        keys.clear();
        Ok(())
    };
    let mut io_err: Option<std::io::Error> = None;
    let r = Reader::open(input)?.for_each(|_, rec| {
        texts.push(rec.text.to_string());
        keys.push(rec.key);
        if keys.len() == LOOKUP_BATCH {
            if let Err(e) = flush(&mut texts, &mut keys, &mut out) {
                io_err = Some(e);
                return Err(KeyFileError::Io {
                    path: PathBuf::from("<stdout>"),
                    source: std::io::Error::other("write failed"),
                });
            }
        }
        Ok(())
    });
    if let Some(e) = io_err {
        return Err(e).context("writing to stdout");
    }
    r?;
    flush(&mut texts, &mut keys, &mut out).context("writing to stdout")?;
    out.flush().context("writing to stdout")?;
    Ok(())
}

fn inspect(file: &Path, json: bool) -> anyhow::Result<()> {
    let gpt = load(file)?;
    let s = gpt.stats();
    let v = serde_json::json!({
        "file": file.display().to_string(),
        "keys": s.keys,
        "value_bits": s.value_bits,
        "config": s.config.to_string(),
        "bits_per_key": s.bits_per_key,
        "fallback_keys": s.fallback_keys,
        "fallback_groups": s.fallback_groups,
        "bytes": s.bytes,
        "blocks": s.blocks,
        "groups": s.groups,
        "page_size": s.page_info.label(),
    });
    if json {
        println!("{v}");
    } else {
        for (k, val) in v.as_object().expect("an object") {
            println!("{k:>14}: {}", val.to_string().trim_matches('"'));
        }
    }
    Ok(())
}
