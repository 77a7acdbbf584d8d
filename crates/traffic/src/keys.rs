//! Key files: the one CSV parser of the project. `scalebricks gpt build|lookup` read keys and
//! their values with it, and flows files (`scalebricks gen --flows`, [`crate::flows`]) read their
//! first column with it; 5-tuples are encoded by [`sb_wire::FiveTuple::key`].
//!
//! A line starts with its key, comma separated, fields trimmed of surrounding blanks: an IPv4
//! address (4 bytes), an IPv6 address (16 bytes), `0x`-prefixed hex bytes (4 to 64 bytes), or a
//! 5-tuple in five columns (below). [`parse_key_columns`] reads the key and hands back the
//! columns after it (a flows file's `teid,enb,node`); [`parse_line`] is the stricter format of a
//! table file, the key and at most one value column:
//!
//! - `key,value`: `key` is an IPv4 address (4 bytes), an IPv6 address (16 bytes) or `0x`-prefixed
//!   hex bytes (4 to 64 bytes, an even number of hex digits);
//! - `proto,src_ip,src_port,dst_ip,dst_port,value`: a 5-tuple, encoded as
//!   `proto (1) | src ip | src port (2, big endian) | dst ip | dst port (2, BE)`, so 13 bytes for
//!   IPv4 and 37 bytes for IPv6 (both addresses of one family). `proto` is a number 0-255 or one
//!   of `tcp`, `udp`, `icmp`, `icmpv6`, `sctp`.
//!
//! The value column is a decimal (or `0x` hex) unsigned integer; readers that only need keys
//! (lookups) accept lines with or without it. Blank lines and lines starting with `#` are
//! skipped, and so is a header: the first record line when it is not data and consists only of
//! words (`key,value`, `proto,src_ip,...`, `ue,teid,enb,node`). Errors name the line.

use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use sb_wire::FiveTuple;

/// Shortest key accepted (an IPv4 address).
pub const MIN_KEY_BYTES: usize = 4;
/// Longest key accepted.
pub const MAX_KEY_BYTES: usize = 64;

/// Why a key file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A line is not a record of the format.
    #[error("{path}:{line}: {msg}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        msg: String,
    },
    /// A key appears twice.
    #[error("{path}:{line}: duplicate key `{key}` (first on line {first})")]
    Duplicate {
        /// The file.
        path: PathBuf,
        /// 1-based line number of the second occurrence.
        line: usize,
        /// 1-based line number of the first occurrence.
        first: usize,
        /// The key as written on `line`.
        key: String,
    },
    /// A value does not fit in the table's value width.
    #[error("{path}:{line}: value {value} does not fit in {bits} bits (max {max})")]
    ValueTooWide {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The value read.
        value: u64,
        /// The value width asked for.
        bits: u32,
        /// The largest value that fits.
        max: u64,
    },
    /// A line of a table file has no value column.
    #[error("{path}:{line}: no value column (expected `key,value` or a 5-tuple and a value)")]
    MissingValue {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
    },
}

/// What kind of key a line starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// An IPv4 address: 4 bytes.
    Ipv4,
    /// An IPv6 address: 16 bytes.
    Ipv6,
    /// `0x` hex bytes.
    Hex,
    /// A 5-tuple in five columns: 13 bytes (IPv4) or 37 (IPv6).
    FiveTuple,
}

/// A line's key and the columns after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyColumns<'a> {
    /// The key's text exactly as written (its column or columns, ends trimmed).
    pub text: &'a str,
    /// What kind of key it is.
    pub kind: KeyKind,
    /// The key's canonical bytes.
    pub key: Vec<u8>,
    /// The columns after the key, each trimmed.
    pub rest: Vec<&'a str>,
}

impl<'a> KeyColumns<'a> {
    /// The line as a table record: the key and at most one value column.
    pub fn into_record(self) -> Result<Record<'a>, String> {
        let value = match self.rest.as_slice() {
            [] => None,
            [v] => Some(parse_value(v)?),
            more => {
                let n = more.len()
                    + if self.kind == KeyKind::FiveTuple {
                        5
                    } else {
                        1
                    };
                return Err(format!(
                    "{n} columns; expected `key,value` (2) or `proto,src_ip,src_port,dst_ip,dst_port,value` (6)"
                ));
            }
        };
        Ok(Record {
            text: self.text,
            key: self.key,
            value,
        })
    }
}

/// One parsed record line of a table file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The key's text exactly as written (the line without its value column, ends trimmed).
    pub text: &'a str,
    /// The key's canonical bytes.
    pub key: Vec<u8>,
    /// The value column, if the line has one.
    pub value: Option<u64>,
}

/// Parses a key written as an IPv4/IPv6 address or `0x` hex bytes into its canonical bytes.
pub fn parse_key(s: &str) -> Result<Vec<u8>, String> {
    parse_single_key(s).map(|(_, k)| k)
}

fn parse_single_key(s: &str) -> Result<(KeyKind, Vec<u8>), String> {
    let s = s.trim();
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return Ok((KeyKind::Hex, parse_hex(hex)?));
    }
    match s.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => Ok((KeyKind::Ipv4, a.octets().to_vec())),
        Ok(IpAddr::V6(a)) => Ok((KeyKind::Ipv6, a.octets().to_vec())),
        Err(_) => Err(format!(
            "key `{s}` is not an IPv4/IPv6 address or 0x-prefixed hex bytes"
        )),
    }
}

/// Whether a field is written as a single key (an address or `0x` hex), right or wrong; a
/// 5-tuple's first field (a protocol number or name) never is.
fn is_single_key(s: &str) -> bool {
    let s = s.trim();
    s.starts_with("0x") || s.starts_with("0X") || s.parse::<IpAddr>().is_ok()
}

fn parse_hex(hex: &str) -> Result<Vec<u8>, String> {
    if hex.len() % 2 != 0 {
        return Err(format!("hex key `0x{hex}` has an odd number of digits"));
    }
    let n = hex.len() / 2;
    if !(MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&n) {
        return Err(format!(
            "hex key `0x{hex}` is {n} bytes; keys are {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes"
        ));
    }
    let digit = |c: u8| -> Result<u8, String> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(format!("hex key `0x{hex}` has a non-hex digit")),
        }
    };
    hex.as_bytes()
        .chunks(2)
        .map(|p| Ok(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

/// Parses an IP protocol: a number 0-255 or a common name.
pub fn parse_proto(s: &str) -> Result<u8, String> {
    let s = s.trim();
    match s.to_ascii_lowercase().as_str() {
        "tcp" => Ok(6),
        "udp" => Ok(17),
        "icmp" => Ok(1),
        "icmpv6" => Ok(58),
        "sctp" => Ok(132),
        _ => s.parse::<u8>().map_err(|_| {
            format!("protocol `{s}` is not a number 0-255 or tcp/udp/icmp/icmpv6/sctp")
        }),
    }
}

fn parse_port(s: &str) -> Result<u16, String> {
    let s = s.trim();
    s.parse::<u16>()
        .map_err(|_| format!("port `{s}` is not a number 0-65535"))
}

/// The canonical bytes of a 5-tuple key, [`FiveTuple::key`]: proto, src ip, src port (BE), dst
/// ip, dst port (BE). Both addresses must be of one family: 13 bytes for IPv4, 37 for IPv6.
pub fn encode_five_tuple(
    proto: u8,
    src: IpAddr,
    src_port: u16,
    dst: IpAddr,
    dst_port: u16,
) -> Result<Vec<u8>, String> {
    if src.is_ipv4() != dst.is_ipv4() {
        return Err("source and destination addresses are of different families".into());
    }
    let t = FiveTuple {
        protocol: proto,
        src_addr: src,
        src_port,
        dst_addr: dst,
        dst_port,
    };
    Ok(t.key().to_vec())
}

fn parse_ip(s: &str) -> Result<IpAddr, String> {
    let s = s.trim();
    s.parse::<IpAddr>()
        .map_err(|_| format!("`{s}` is not an IPv4 or IPv6 address"))
}

/// Parses a value column: decimal or `0x` hex.
pub fn parse_value(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse::<u64>(),
    };
    r.map_err(|_| format!("value `{s}` is not an unsigned integer"))
}

/// Parses the key at the start of a line and splits off the columns after it. `Ok(None)` for
/// blank and `#` comment lines. The first column decides: an address or `0x` hex is a key of one
/// column; anything else starts a 5-tuple of five columns.
pub fn parse_key_columns(line: &str) -> Result<Option<KeyColumns<'_>>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let fields: Vec<&str> = line.split(',').collect();
    let (kind, key, nkey) = if is_single_key(fields[0]) || fields.len() < 5 {
        let (kind, key) = parse_single_key(fields[0])?;
        (kind, key, 1)
    } else {
        let key = encode_five_tuple(
            parse_proto(fields[0])?,
            parse_ip(fields[1])?,
            parse_port(fields[2])?,
            parse_ip(fields[3])?,
            parse_port(fields[4])?,
        )?;
        (KeyKind::FiveTuple, key, 5)
    };
    // The key's columns as written: up to the comma after its last field.
    let end = fields[..nkey].iter().map(|f| f.len()).sum::<usize>() + (nkey - 1);
    Ok(Some(KeyColumns {
        text: line[..end].trim_end(),
        kind,
        key,
        rest: fields[nkey..].iter().map(|f| f.trim()).collect(),
    }))
}

/// Parses one line of a table file: a key and at most one value column. `Ok(None)` for blank
/// and `#` comment lines.
pub fn parse_line(line: &str) -> Result<Option<Record<'_>>, String> {
    parse_key_columns(line)?
        .map(KeyColumns::into_record)
        .transpose()
}

/// Whether a line that did not parse looks like a header: only words (letters, `_`, `-`, blanks).
fn looks_like_header(line: &str) -> bool {
    line.split(',').all(|f| {
        let f = f.trim();
        !f.is_empty()
            && f.chars()
                .all(|c| c.is_ascii_alphabetic() || c == '_' || c == '-' || c == ' ')
    })
}

/// Reads a key file line by line, skipping comments, blank lines and a header.
pub struct Reader<'a> {
    path: PathBuf,
    lines: std::io::Lines<Box<dyn BufRead + 'a>>,
    line_no: usize,
    seen_record_line: bool,
}

impl Reader<'static> {
    /// Opens `path`.
    pub fn open(path: &Path) -> Result<Reader<'static>, KeyFileError> {
        let f = File::open(path).map_err(|source| KeyFileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Reader::new(path, BufReader::with_capacity(1 << 20, f)))
    }
}

impl<'a> Reader<'a> {
    /// Reads from `r`; `path` names it in errors.
    pub fn new(path: impl Into<PathBuf>, r: impl BufRead + 'a) -> Reader<'a> {
        Reader {
            path: path.into(),
            lines: (Box::new(r) as Box<dyn BufRead + 'a>).lines(),
            line_no: 0,
            seen_record_line: false,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Calls `f(line_no, record)` for each record line of a table file ([`parse_line`]), in
    /// order; stops at the first error (its own or `f`'s).
    pub fn for_each(
        mut self,
        mut f: impl FnMut(usize, Record<'_>) -> Result<(), KeyFileError>,
    ) -> Result<(), KeyFileError> {
        while let Some(line) = self.next_line()? {
            match parse_line(&line) {
                Ok(None) => {}
                Ok(Some(r)) => {
                    self.seen_record_line = true;
                    f(self.line_no, r)?;
                }
                Err(msg) => self.not_a_record(&line, msg)?,
            }
        }
        Ok(())
    }

    /// Calls `f(line_no, key_and_columns)` for each record line ([`parse_key_columns`]: the
    /// key and whatever columns follow it), in order; stops at the first error (its own or
    /// `f`'s).
    pub fn for_each_key(
        mut self,
        mut f: impl FnMut(usize, KeyColumns<'_>) -> Result<(), KeyFileError>,
    ) -> Result<(), KeyFileError> {
        while let Some(line) = self.next_line()? {
            match parse_key_columns(&line) {
                Ok(None) => {}
                Ok(Some(k)) => {
                    self.seen_record_line = true;
                    f(self.line_no, k)?;
                }
                Err(msg) => self.not_a_record(&line, msg)?,
            }
        }
        Ok(())
    }

    fn next_line(&mut self) -> Result<Option<String>, KeyFileError> {
        let Some(line) = self.lines.next() else {
            return Ok(None);
        };
        self.line_no += 1;
        line.map(Some).map_err(|source| KeyFileError::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// A line that did not parse: fine if it is the header (the first record line, only
    /// words), the error `msg` otherwise.
    fn not_a_record(&mut self, line: &str, msg: String) -> Result<(), KeyFileError> {
        let first = !self.seen_record_line;
        self.seen_record_line = true;
        if first && looks_like_header(line.trim()) {
            Ok(())
        } else {
            Err(KeyFileError::Malformed {
                path: self.path.clone(),
                line: self.line_no,
                msg,
            })
        }
    }
}

/// A whole key file of a table: keys (in one arena), values and line numbers, in file order,
/// checked for duplicates and value width.
#[derive(Debug, Default)]
pub struct Table {
    arena: Vec<u8>,
    ends: Vec<usize>,
    /// The values, in file order.
    pub values: Vec<u16>,
    /// 1-based line numbers of the records, in file order.
    pub lines: Vec<usize>,
}

impl Table {
    /// Number of keys.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`-th key's bytes.
    pub fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.arena[start..self.ends[i]]
    }

    /// All keys, as slices into the arena.
    pub fn keys(&self) -> Vec<&[u8]> {
        (0..self.len()).map(|i| self.key(i)).collect()
    }

    /// Reads `path`; every line must carry a value that fits in `value_bits` (1 to 16) bits and
    /// every key must be new.
    pub fn read(path: &Path, value_bits: u32) -> Result<Table, KeyFileError> {
        assert!((1..=16).contains(&value_bits), "value_bits must be 1..=16");
        let max = (1u64 << value_bits) - 1;
        let mut t = Table::default();
        Reader::open(path)?.for_each(|line, r| {
            let value = r.value.ok_or_else(|| KeyFileError::MissingValue {
                path: path.to_path_buf(),
                line,
            })?;
            if value > max {
                return Err(KeyFileError::ValueTooWide {
                    path: path.to_path_buf(),
                    line,
                    value,
                    bits: value_bits,
                    max,
                });
            }
            t.arena.extend_from_slice(&r.key);
            t.ends.push(t.arena.len());
            t.values.push(value as u16);
            t.lines.push(line);
            Ok(())
        })?;
        if let Some((first, second)) = t.find_duplicate() {
            // Read the offending line again for its text (errors are rare; keys may be many).
            let text = line_text(path, t.lines[second]).unwrap_or_default();
            return Err(KeyFileError::Duplicate {
                path: path.to_path_buf(),
                line: t.lines[second],
                first: t.lines[first],
                key: text,
            });
        }
        Ok(t)
    }

    /// The first duplicate in file order: `(first index, second index)`.
    fn find_duplicate(&self) -> Option<(usize, usize)> {
        // Sort indices by (hash, key); equal neighbours are duplicates. Among all duplicate
        // pairs report the one whose second occurrence comes first in the file.
        let h = |i: usize| {
            let mut s = DefaultHasher::new();
            self.key(i).hash(&mut s);
            s.finish()
        };
        let mut idx: Vec<(u64, u32)> = (0..self.len()).map(|i| (h(i), i as u32)).collect();
        idx.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| self.key(a.1 as usize).cmp(self.key(b.1 as usize)))
                .then(a.1.cmp(&b.1))
        });
        let mut best: Option<(usize, usize)> = None;
        let mut run_start = 0;
        for j in 1..=idx.len() {
            let same = j < idx.len()
                && idx[j].0 == idx[run_start].0
                && self.key(idx[j].1 as usize) == self.key(idx[run_start].1 as usize);
            if !same {
                if j - run_start > 1 {
                    let first = idx[run_start].1 as usize;
                    let second = idx[run_start + 1].1 as usize;
                    if best.is_none_or(|(_, s)| second < s) {
                        best = Some((first, second));
                    }
                }
                run_start = j;
            }
        }
        best
    }
}

fn line_text(path: &Path, line_no: usize) -> Option<String> {
    let f = File::open(path).ok()?;
    let line = BufReader::new(f).lines().nth(line_no - 1)?.ok()?;
    let r = parse_line(&line).ok()??;
    Some(r.text.to_string())
}

/// Writes `key` as `0x` hex (for generated keys).
pub struct Hex<'a>(pub &'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("0x")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn keys_of_every_kind() {
        assert_eq!(parse_key("10.0.0.1").unwrap(), vec![10, 0, 0, 1]);
        assert_eq!(parse_key("::1").unwrap().len(), 16);
        assert_eq!(
            parse_key("0xdeadBEEF").unwrap(),
            vec![0xde, 0xad, 0xbe, 0xef]
        );
        assert!(parse_key("0xabc").is_err());
        assert!(parse_key("0xab").is_err(), "too short");
        assert!(parse_key(&format!("0x{}", "00".repeat(65))).is_err());
        assert!(parse_key("0xzz00aa11").is_err());
        assert!(parse_key("10.0.0.256").is_err());
        assert!(parse_key("key").is_err());
    }

    #[test]
    fn five_tuples() {
        let r = parse_line("6,10.0.0.1,1234,10.0.0.2,80,3")
            .unwrap()
            .unwrap();
        assert_eq!(r.key, vec![6, 10, 0, 0, 1, 0x04, 0xd2, 10, 0, 0, 2, 0, 80]);
        assert_eq!(r.value, Some(3));
        assert_eq!(r.text, "6,10.0.0.1,1234,10.0.0.2,80");
        let r = parse_line("udp, 2001:db8::1 ,53,2001:db8::2,5353")
            .unwrap()
            .unwrap();
        assert_eq!(r.key.len(), 37);
        assert_eq!(r.key[0], 17);
        assert_eq!(r.value, None);
        assert!(parse_line("6,10.0.0.1,1234,::1,80,3").is_err());
        assert!(parse_line("6,10.0.0.1,70000,10.0.0.2,80,3").is_err());
        assert!(parse_line("300,10.0.0.1,7,10.0.0.2,80,3").is_err());
    }

    #[test]
    fn lines() {
        assert_eq!(parse_line("  ").unwrap(), None);
        assert_eq!(parse_line("# c").unwrap(), None);
        let r = parse_line("10.0.0.1 , 0x3\r").unwrap().unwrap();
        assert_eq!((r.text, r.value), ("10.0.0.1", Some(3)));
        assert!(parse_line("10.0.0.1,1,2").is_err());
        assert!(parse_line("10.0.0.1,x").is_err());
        assert!(looks_like_header("key,value"));
        assert!(looks_like_header(
            "proto,src_ip,src_port,dst_ip,dst_port,value"
        ));
        assert!(!looks_like_header("10.0.0.300,1"));
    }

    #[test]
    fn cluster_flows_file_keys() {
        // The cluster's flows file: header `ue,teid,enb,node`, the UE address is the key.
        let text = "ue,teid,enb,node\n100.64.0.7,305419896,192.0.2.9,2\n";
        let k = parse_key_columns("100.64.0.7,305419896,192.0.2.9,2")
            .unwrap()
            .unwrap();
        assert_eq!((k.kind, k.text), (KeyKind::Ipv4, "100.64.0.7"));
        assert_eq!(k.key, vec![100, 64, 0, 7]);
        assert_eq!(k.rest, vec!["305419896", "192.0.2.9", "2"]);
        let mut seen = Vec::new();
        Reader::new("flows.csv", text.as_bytes())
            .for_each_key(|line, k| {
                seen.push((line, k.key));
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, vec![(2, vec![100, 64, 0, 7])]);
        // A table file takes one value column, not three.
        let e = Reader::new("flows.csv", text.as_bytes())
            .for_each(|_, _| Ok(()))
            .unwrap_err();
        assert!(matches!(e, KeyFileError::Malformed { line: 2, .. }), "{e}");
        // A 5-tuple followed by more columns, and its key as sb-wire encodes it.
        let k = parse_key_columns("tcp,10.0.0.1,1234,10.0.0.2,80,x,y")
            .unwrap()
            .unwrap();
        assert_eq!(k.kind, KeyKind::FiveTuple);
        assert_eq!(k.text, "tcp,10.0.0.1,1234,10.0.0.2,80");
        assert_eq!(k.rest, vec!["x", "y"]);
        let t = FiveTuple {
            protocol: 6,
            src_addr: "10.0.0.1".parse().unwrap(),
            src_port: 1234,
            dst_addr: "10.0.0.2".parse().unwrap(),
            dst_port: 80,
        };
        assert_eq!(k.key, t.key().to_vec());
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn table_reads_and_checks() {
        let f = file("key,value\n# comment\n\n10.0.0.1,1\n0x0a000002,0\n::1,1\n");
        let t = Table::read(f.path(), 1).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t.key(1), &[10, 0, 0, 2]);
        assert_eq!(t.values, vec![1, 0, 1]);
        assert_eq!(t.lines, vec![4, 5, 6]);

        let f = file("key,value\n10.0.0.1,1\n10.0.0.2,1\n0x0a000001,0\n10.0.0.2,0\n");
        match Table::read(f.path(), 1) {
            Err(KeyFileError::Duplicate {
                line, first, key, ..
            }) => assert_eq!((line, first, key.as_str()), (4, 2, "0x0a000001")),
            other => panic!("{other:?}"),
        }
        let f = file("10.0.0.1,1\n10.0.0.2,4\n");
        assert!(matches!(
            Table::read(f.path(), 2),
            Err(KeyFileError::ValueTooWide { line: 2, .. })
        ));
        let f = file("key,value\n10.0.0.1,1\nkey,value\n");
        assert!(matches!(
            Table::read(f.path(), 2),
            Err(KeyFileError::Malformed { line: 3, .. })
        ));
        let f = file("10.0.0.1\n");
        assert!(matches!(
            Table::read(f.path(), 2),
            Err(KeyFileError::MissingValue { line: 1, .. })
        ));
        let f = file("10.0.0.300,1\n");
        assert!(matches!(
            Table::read(f.path(), 2),
            Err(KeyFileError::Malformed { line: 1, .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn parse_line_never_panics(line in "\\PC{0,120}") {
            let _ = parse_line(&line);
            let _ = looks_like_header(&line);
        }

        #[test]
        fn parse_line_never_panics_on_near_records(
            fields in proptest::collection::vec("[0-9a-fA-Fx:.# ]{0,20}", 1..8)
        ) {
            let _ = parse_line(&fields.join(","));
        }

        #[test]
        fn records_round_trip(
            src in proptest::prelude::any::<[u8; 16]>(),
            dst in proptest::prelude::any::<[u8; 16]>(),
            ports in proptest::prelude::any::<(u16, u16)>(),
            proto in proptest::prelude::any::<u8>(),
            v6 in proptest::prelude::any::<bool>(),
            value in proptest::prelude::any::<u16>(),
            hex in proptest::collection::vec(proptest::prelude::any::<u8>(), 4..=64),
        ) {
            let (s, d): (IpAddr, IpAddr) = if v6 {
                (std::net::Ipv6Addr::from(src).into(), std::net::Ipv6Addr::from(dst).into())
            } else {
                let s4: [u8; 4] = src[..4].try_into().unwrap();
                let d4: [u8; 4] = dst[..4].try_into().unwrap();
                (std::net::Ipv4Addr::from(s4).into(), std::net::Ipv4Addr::from(d4).into())
            };
            let line = format!("{proto},{s},{},{d},{},{value}", ports.0, ports.1);
            let r = parse_line(&line).unwrap().unwrap();
            proptest::prop_assert_eq!(&r.key, &encode_five_tuple(proto, s, ports.0, d, ports.1).unwrap());
            proptest::prop_assert_eq!(r.key.len(), if v6 { 37 } else { 13 });
            proptest::prop_assert_eq!(r.value, Some(value as u64));
            proptest::prop_assert_eq!(r.text, &line[..line.rfind(',').unwrap()]);
            let line = format!("{},{value}", Hex(&hex));
            let r = parse_line(&line).unwrap().unwrap();
            proptest::prop_assert_eq!(&r.key, &hex);
            let line = format!("{s}");
            let r = parse_line(&line).unwrap().unwrap();
            proptest::prop_assert_eq!(r.value, None);
            proptest::prop_assert_eq!(r.key.len(), if v6 { 16 } else { 4 });
        }
    }
}
