//! The files a node loads its tables from, written by `cluster up` ([`write_cluster_tables`]):
//!
//! - `gpt.bin`: the GPT image, exactly what `scalebricks gpt build` writes (SetSep format,
//!   versioned and checksummed); its seed is the cluster's key-hash seed.
//! - `fib-node{i}.bin`: node i's FIB entries; `uplink-node{i}.bin`: the tunnels its `ran`
//!   port serves, by TEID. Both in the entry format below.
//!
//! Entry file (little endian): magic `SBENTRY1`, cluster id (u64), node (u16), kind (u8: 1
//! FIB, 2 uplink), one zero byte, key bytes (u32), value bytes (u32), count (u64), then `count`
//! key+value records, then a CRC-32 of everything before it. [`read_entries`] checks all of
//! it, including that the file belongs to the cluster and node that load it.

use sb_engine::lte::{Tunnel, KEY_BYTES, VALUE_BYTES};
use sb_engine::{cluster, Arch};
use std::io::Write;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"SBENTRY1";
const HEADER: usize = 8 + 8 + 2 + 1 + 1 + 4 + 4 + 8;

/// What an entry file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// Downstream FIB entries (UE key -> tunnel).
    Fib = 1,
    /// Uplink entries (TEID -> UE key, eNodeB).
    Uplink = 2,
}

/// Entries read from a file.
#[derive(Debug)]
pub struct Entries {
    /// Key size.
    pub key_bytes: usize,
    /// Value size.
    pub value_bytes: usize,
    /// `count * (key_bytes + value_bytes)` bytes of records.
    pub records: Vec<u8>,
}

impl Entries {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.records.len() / (self.key_bytes + self.value_bytes)
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The (key, value) pairs.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> + '_ {
        self.records
            .chunks_exact(self.key_bytes + self.value_bytes)
            .map(|r| r.split_at(self.key_bytes))
    }
}

/// Why a table file was refused.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Not an entry file, truncated, or corrupt.
    #[error("{path}: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The file was written for another cluster or node, or holds another kind of table.
    #[error("{path}: {why} (a table from another cluster? run `scalebricks cluster up` again)")]
    Foreign {
        /// The file.
        path: PathBuf,
        /// What does not match.
        why: String,
    },
    /// The GPT image is invalid.
    #[error("{path}: {source}")]
    Gpt {
        /// The file.
        path: PathBuf,
        /// The loader's error.
        #[source]
        source: sb_setsep::LoadError,
    },
    /// The GPT could not be built.
    #[error("building the GPT: {0}")]
    Build(#[from] sb_setsep::BuildError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TableError + '_ {
    move |source| TableError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes an entry file (atomically: a temporary file renamed into place).
pub fn write_entries<'a>(
    path: &Path,
    cluster_id: u64,
    node: u16,
    kind: EntryKind,
    key_bytes: usize,
    value_bytes: usize,
    entries: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<(), TableError> {
    let mut b = Vec::with_capacity(HEADER);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&cluster_id.to_le_bytes());
    b.extend_from_slice(&node.to_le_bytes());
    b.push(kind as u8);
    b.push(0);
    b.extend_from_slice(&(key_bytes as u32).to_le_bytes());
    b.extend_from_slice(&(value_bytes as u32).to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    let mut n = 0u64;
    for (k, v) in entries {
        assert_eq!((k.len(), v.len()), (key_bytes, value_bytes), "entry size");
        b.extend_from_slice(k);
        b.extend_from_slice(v);
        n += 1;
    }
    b[28..36].copy_from_slice(&n.to_le_bytes());
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(&b).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    Ok(())
}

/// Reads and checks an entry file: format, checksum, and that it was written for cluster
/// `cluster_id`, node `node`, kind `kind`.
pub fn read_entries(
    path: &Path,
    cluster_id: u64,
    node: u16,
    kind: EntryKind,
) -> Result<Entries, TableError> {
    let b = std::fs::read(path).map_err(io(path))?;
    parse_entries(&b, cluster_id, node, kind).map_err(|(foreign, why)| {
        let path = path.to_path_buf();
        if foreign {
            TableError::Foreign { path, why }
        } else {
            TableError::Corrupt { path, why }
        }
    })
}

/// [`read_entries`] on bytes: `Err((foreign, why))`.
pub fn parse_entries(
    b: &[u8],
    cluster_id: u64,
    node: u16,
    kind: EntryKind,
) -> Result<Entries, (bool, String)> {
    let corrupt = |why: &str| (false, why.to_string());
    if b.len() < HEADER + 4 || &b[..8] != MAGIC {
        return Err(corrupt("not a scalebricks entry file"));
    }
    let (body, crc) = b.split_at(b.len() - 4);
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(corrupt("checksum mismatch (truncated or corrupt)"));
    }
    let u64_at = |o: usize| u64::from_le_bytes(body[o..o + 8].try_into().expect("8 bytes"));
    let u32_at = |o: usize| u32::from_le_bytes(body[o..o + 4].try_into().expect("4 bytes"));
    let (cid, n, k) = (
        u64_at(8),
        u16::from_le_bytes([body[16], body[17]]),
        body[18],
    );
    let (kb, vb, count) = (u32_at(20) as usize, u32_at(24) as usize, u64_at(28));
    if cid != cluster_id {
        return Err((
            true,
            format!("written for cluster {cid:016x}, this is cluster {cluster_id:016x}"),
        ));
    }
    if n != node {
        return Err((true, format!("written for node {n}, this is node {node}")));
    }
    if k != kind as u8 {
        return Err((
            true,
            format!("holds table kind {k}, expected {}", kind as u8),
        ));
    }
    if kb == 0 || vb == 0 || kb > 64 || vb > 256 {
        return Err(corrupt("bad key or value size"));
    }
    let rec = (kb + vb) as u64;
    if count.checked_mul(rec) != Some((body.len() - HEADER) as u64) {
        return Err(corrupt("entry count does not match the file size"));
    }
    Ok(Entries {
        key_bytes: kb,
        value_bytes: vb,
        records: body[HEADER..].to_vec(),
    })
}

/// File name of node `i`'s FIB entries.
pub fn fib_file(node: usize) -> String {
    format!("fib-node{node}.bin")
}

/// File name of node `i`'s uplink entries.
pub fn uplink_file(node: usize) -> String {
    format!("uplink-node{node}.bin")
}

/// File name of the GPT image.
pub const GPT_FILE: &str = "gpt.bin";
/// File name of the flows.
pub const FLOWS_FILE: &str = "flows.csv";

/// What [`write_cluster_tables`] wrote.
#[derive(Debug, Clone)]
pub struct Written {
    /// Files written, relative to the directory.
    pub files: Vec<String>,
    /// GPT bytes (0 without a GPT).
    pub gpt_bytes: usize,
    /// FIB entries per node.
    pub fib_entries: Vec<usize>,
}

/// Writes every table of a cluster of `nodes` nodes running `arch` over `tunnels` into `dir`:
/// `flows.csv`, `gpt.bin` (ScaleBricks with `gpt`; without it the nodes' control plane builds
/// the GPT), and per node its FIB and uplink entries.
pub fn write_cluster_tables(
    dir: &Path,
    arch: Arch,
    tunnels: &[Tunnel],
    nodes: u16,
    seed: u64,
    cluster_id: u64,
    gpt: bool,
) -> Result<Written, TableError> {
    let mut files = Vec::new();
    let fp = dir.join(FLOWS_FILE);
    let f = std::fs::File::create(&fp).map_err(io(&fp))?;
    sb_engine::lte::write_flows(std::io::BufWriter::new(f), tunnels).map_err(io(&fp))?;
    files.push(FLOWS_FILE.to_string());
    let mut gpt_bytes = 0;
    if arch == Arch::ScaleBricks && gpt {
        let gpt = cluster::build_gpt(tunnels, nodes.into(), seed, 0)?;
        let gp = dir.join(GPT_FILE);
        let image = gpt.to_bytes();
        gpt_bytes = image.len();
        std::fs::write(&gp, image).map_err(io(&gp))?;
        files.push(GPT_FILE.to_string());
    }
    let mut fib_entries = Vec::new();
    for n in 0..nodes {
        let slice = cluster::fib_slice(arch, tunnels, n, nodes, seed);
        let kv: Vec<([u8; KEY_BYTES], [u8; VALUE_BYTES])> = slice
            .iter()
            .map(|&i| (tunnels[i].key(), tunnels[i].value()))
            .collect();
        let name = fib_file(n.into());
        write_entries(
            &dir.join(&name),
            cluster_id,
            n,
            EntryKind::Fib,
            KEY_BYTES,
            VALUE_BYTES,
            kv.iter().map(|(k, v)| (&k[..], &v[..])),
        )?;
        files.push(name);
        fib_entries.push(kv.len());
        let up: Vec<([u8; 4], [u8; sb_engine::lte::UPLINK_VALUE_BYTES])> = tunnels
            .iter()
            .filter(|t| t.node == n)
            .map(Tunnel::uplink_entry)
            .collect();
        let name = uplink_file(n.into());
        write_entries(
            &dir.join(&name),
            cluster_id,
            n,
            EntryKind::Uplink,
            4,
            sb_engine::lte::UPLINK_VALUE_BYTES,
            up.iter().map(|(k, v)| (&k[..], &v[..])),
        )?;
        files.push(name);
    }
    Ok(Written {
        files,
        gpt_bytes,
        fib_entries,
    })
}

/// Loads the GPT image at `path` and checks that it hashes with the cluster's seed.
pub fn read_gpt(path: &Path, seed: u64) -> Result<sb_setsep::SetSep, TableError> {
    let b = std::fs::read(path).map_err(io(path))?;
    let g = sb_setsep::SetSep::from_bytes(&b).map_err(|source| TableError::Gpt {
        path: path.to_path_buf(),
        source,
    })?;
    if g.seed() != seed {
        return Err(TableError::Foreign {
            path: path.to_path_buf(),
            why: format!(
                "GPT built with seed {:016x}, this cluster hashes with {seed:016x}",
                g.seed()
            ),
        });
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn entries_round_trip_and_refuse_foreign_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f.bin");
        let kv: Vec<([u8; 4], [u8; 3])> = (0..50u32)
            .map(|i| (i.to_le_bytes(), [i as u8; 3]))
            .collect();
        write_entries(
            &p,
            7,
            2,
            EntryKind::Uplink,
            4,
            3,
            kv.iter().map(|(k, v)| (&k[..], &v[..])),
        )
        .unwrap();
        let e = read_entries(&p, 7, 2, EntryKind::Uplink).unwrap();
        assert_eq!(e.len(), 50);
        assert!(e
            .iter()
            .zip(&kv)
            .all(|((k, v), (k2, v2))| k == k2 && v == v2));
        for (cid, node, kind) in [
            (8, 2, EntryKind::Uplink),
            (7, 1, EntryKind::Uplink),
            (7, 2, EntryKind::Fib),
        ] {
            let err = read_entries(&p, cid, node, kind).unwrap_err();
            assert!(matches!(err, TableError::Foreign { .. }), "{err}");
        }
        let mut b = std::fs::read(&p).unwrap();
        b[HEADER + 5] ^= 1;
        assert!(matches!(
            parse_entries(&b, 7, 2, EntryKind::Uplink),
            Err((false, _))
        ));
    }

    proptest! {
        #[test]
        fn parse_entries_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_entries(&b, 0, 0, EntryKind::Fib);
        }
    }
}
