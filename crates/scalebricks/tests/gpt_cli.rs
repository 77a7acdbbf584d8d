//! `scalebricks gpt build|lookup|inspect` checked from outside: the built binary on CSV files.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_scalebricks"));
    c.env("RUST_BACKTRACE", "0").env("RUST_LIB_BACKTRACE", "0");
    c
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A tiny deterministic generator (xorshift64*), so the tests need no extra crate.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn p(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Files in `dir` other than the ones named (temporary leftovers, unwanted outputs).
fn extra_files(dir: &Path, expected: &[&str]) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !expected.contains(&n.as_str()))
        .collect()
}

/// Builds from `csv` (a body of `key,value` lines whose keys are `keys`), looks every key up,
/// checks the output is exactly `key-as-written,value` per line, and checks `inspect --json`.
fn round_trip(name: &str, header: &str, lines: &[(String, u64)], value_bits: u32) {
    let dir = tempfile::tempdir().unwrap();
    let csv = p(dir.path(), "keys.csv");
    let gpt = p(dir.path(), "keys.gpt");
    let mut text = String::new();
    writeln!(text, "{header}").unwrap();
    writeln!(text, "# a comment line").unwrap();
    for (i, (k, v)) in lines.iter().enumerate() {
        if i == lines.len() / 2 {
            text.push('\n'); // a blank line in the middle
        }
        writeln!(text, "{k},{v}").unwrap();
    }
    std::fs::write(&csv, text).unwrap();
    let vb = value_bits.to_string();
    let o = run(&[
        "gpt",
        "build",
        "--input",
        s(&csv),
        "--value-bits",
        &vb,
        "--output",
        s(&gpt),
        "--threads",
        "2",
    ]);
    assert!(o.status.success(), "{name}: build failed: {}", stderr(&o));
    assert!(gpt.exists());
    assert_eq!(
        extra_files(dir.path(), &["keys.csv", "keys.gpt"]),
        Vec::<String>::new()
    );

    let o = run(&["gpt", "lookup", s(&gpt), "--input", s(&csv)]);
    assert!(o.status.success(), "{name}: lookup failed: {}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let want: String = lines.iter().map(|(k, v)| format!("{k},{v}\n")).collect();
    assert_eq!(out, want, "{name}: lookup output");

    let o = run(&["gpt", "inspect", s(&gpt), "--json"]);
    assert!(o.status.success(), "{name}: inspect failed: {}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(j["keys"].as_u64(), Some(lines.len() as u64), "{name}: {j}");
    assert_eq!(
        j["value_bits"].as_u64(),
        Some(value_bits as u64),
        "{name}: {j}"
    );
    assert_eq!(j["config"].as_str(), Some("16+8"), "{name}: {j}");
    for field in [
        "bits_per_key",
        "fallback_keys",
        "bytes",
        "blocks",
        "groups",
        "page_size",
    ] {
        assert!(!j[field].is_null(), "{name}: inspect lacks {field}: {j}");
    }
    assert!(j["bytes"].as_u64().unwrap() > 0, "{name}: {j}");
}

#[test]
fn round_trip_ipv4() {
    let mut r = Rng(1);
    let mut seen = std::collections::HashSet::new();
    let lines: Vec<(String, u64)> = std::iter::from_fn(|| {
        let a = r.next() as u32;
        Some(a)
    })
    .filter(|a| seen.insert(*a))
    .take(3000)
    .map(|a| (std::net::Ipv4Addr::from(a).to_string(), a as u64 % 4))
    .collect();
    round_trip("ipv4", "key,value", &lines, 2);
}

#[test]
fn round_trip_ipv6_shared_prefix() {
    // Addresses of one /64 differing in the last bits: adversarial for weak hashes.
    let lines: Vec<(String, u64)> = (0..2000u64)
        .map(|i| (format!("2001:db8:1:2::{:x}", i + 1), i * 7 % 8))
        .collect();
    round_trip("ipv6", "key,value", &lines, 3);
}

#[test]
fn round_trip_hex_every_length() {
    let mut r = Rng(7);
    let lines: Vec<(String, u64)> = (0..1500usize)
        .map(|i| {
            let len = 4 + i % 61; // 4..=64 bytes
            let mut k = format!("0x{:08x}", i as u32); // distinct first 4 bytes
            for _ in 4..len {
                write!(k, "{:02X}", r.next() as u8).unwrap();
            }
            (k, r.next() % (1 << 16))
        })
        .collect();
    round_trip("hex", "key,value", &lines, 16);
}

#[test]
fn round_trip_five_tuples() {
    // IPv4 and IPv6 5-tuples that differ in one port only, and protocol names.
    let mut lines = Vec::new();
    for i in 0..1000u64 {
        lines.push((format!("6,10.0.0.1,{},192.168.1.1,80", 1024 + i), i % 2));
        lines.push((
            format!("udp,2001:db8::1,53,2001:db8::2,{}", 2000 + i),
            (i / 3) % 2,
        ));
    }
    round_trip(
        "5-tuple",
        "proto,src_ip,src_port,dst_ip,dst_port,value",
        &lines,
        1,
    );
}

#[test]
fn lookup_takes_keys_without_values_and_prints_them_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let csv = p(dir.path(), "t.csv");
    let gpt = p(dir.path(), "t.gpt");
    std::fs::write(&csv, "10.1.2.3,5\n0xAABBCCDD,2\n6,1.2.3.4,1,5.6.7.8,2,7\n").unwrap();
    let o = run(&[
        "gpt",
        "build",
        "--input",
        s(&csv),
        "--value-bits",
        "3",
        "--output",
        s(&gpt),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let q = p(dir.path(), "q.csv");
    std::fs::write(&q, "key\n0xAABBCCDD\n 10.1.2.3 \n6,1.2.3.4,1,5.6.7.8,2\n").unwrap();
    let o = run(&["gpt", "lookup", s(&gpt), "--input", s(&q)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "0xAABBCCDD,2\n10.1.2.3,5\n6,1.2.3.4,1,5.6.7.8,2,7\n"
    );
}

#[test]
fn empty_table_builds() {
    let dir = tempfile::tempdir().unwrap();
    let csv = p(dir.path(), "e.csv");
    let gpt = p(dir.path(), "e.gpt");
    std::fs::write(&csv, "key,value\n").unwrap();
    let o = run(&[
        "gpt",
        "build",
        "--input",
        s(&csv),
        "--value-bits",
        "1",
        "--output",
        s(&gpt),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["gpt", "inspect", s(&gpt), "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["keys"].as_u64(), Some(0));
}

/// A build from `body` must fail naming `line`, with `what` in the message, leaving no file.
fn build_fails(body: &str, value_bits: &str, line: usize, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let csv = p(dir.path(), "bad.csv");
    let gpt = p(dir.path(), "out.gpt");
    std::fs::write(&csv, body).unwrap();
    let o = run(&[
        "gpt",
        "build",
        "--input",
        s(&csv),
        "--value-bits",
        value_bits,
        "--output",
        s(&gpt),
    ]);
    let err = stderr(&o);
    assert!(!o.status.success(), "build of {body:?} succeeded");
    assert!(
        err.contains(&format!("bad.csv:{line}:")),
        "no line {line} in: {err}"
    );
    assert!(err.contains(what), "no `{what}` in: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        extra_files(dir.path(), &["bad.csv"]),
        Vec::<String>::new(),
        "files left behind"
    );
}

#[test]
fn duplicate_key_names_its_line() {
    build_fails(
        "key,value\n10.0.0.1,1\n10.0.0.2,0\n0x0a000001,1\n",
        "1",
        4,
        "duplicate key",
    );
    build_fails(
        "6,1.1.1.1,1,2.2.2.2,2,0\n# c\n6,1.1.1.1,1,2.2.2.2,2,1\n",
        "1",
        3,
        "first on line 1",
    );
}

#[test]
fn too_wide_value_names_its_line() {
    build_fails(
        "key,value\n10.0.0.1,3\n10.0.0.2,4\n",
        "2",
        3,
        "does not fit in 2 bits",
    );
    build_fails("::1,65535\n::2,65536\n", "16", 2, "does not fit in 16 bits");
}

#[test]
fn malformed_lines_name_their_line() {
    build_fails(
        "key,value\n10.0.0.1,1\n10.0.0.300,1\n",
        "1",
        3,
        "not an IPv4",
    );
    build_fails("10.0.0.1,1\n10.0.0.2\n", "1", 2, "no value column");
    build_fails("10.0.0.1,1\n10.0.0.2,1,2\n", "1", 2, "3 columns");
    build_fails(
        "10.0.0.1,1\n10.0.0.2,x\n",
        "1",
        2,
        "not an unsigned integer",
    );
    build_fails("0x0102,1\n", "1", 1, "keys are 4 to 64 bytes");
    build_fails("6,10.0.0.1,1,::1,2,0\n", "1", 1, "different families");
    build_fails("6,10.0.0.1,99999,10.0.0.2,2,0\n", "1", 1, "port");
    build_fails(
        "key,value\n10.0.0.1,1\nkey,value\n",
        "1",
        3,
        "key `key` is not an IPv4/IPv6 address",
    );
}

#[test]
fn failed_build_keeps_an_existing_output_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let csv = p(dir.path(), "bad.csv");
    let gpt = p(dir.path(), "out.gpt");
    std::fs::write(&gpt, b"previous").unwrap();
    std::fs::write(&csv, "10.0.0.1,1\n10.0.0.1,1\n").unwrap();
    let o = run(&[
        "gpt",
        "build",
        "--input",
        s(&csv),
        "--value-bits",
        "1",
        "--output",
        s(&gpt),
    ]);
    assert!(!o.status.success());
    assert_eq!(std::fs::read(&gpt).unwrap(), b"previous");
    assert_eq!(
        extra_files(dir.path(), &["bad.csv", "out.gpt"]),
        Vec::<String>::new()
    );
}

#[test]
fn missing_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let nope = p(dir.path(), "nope.csv");
    let gpt = p(dir.path(), "out.gpt");
    let o = run(&[
        "gpt",
        "build",
        "--input",
        s(&nope),
        "--value-bits",
        "1",
        "--output",
        s(&gpt),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("nope.csv"), "{}", stderr(&o));
    assert!(!gpt.exists());
    let o = run(&[
        "gpt",
        "lookup",
        s(&p(dir.path(), "nope.gpt")),
        "--input",
        s(&nope),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("nope.gpt"), "{}", stderr(&o));
    let o = run(&["gpt", "inspect", s(&p(dir.path(), "nope.gpt"))]);
    assert!(!o.status.success());
    // An output directory that does not exist.
    let csv = p(dir.path(), "k.csv");
    std::fs::write(&csv, "10.0.0.1,1\n").unwrap();
    let o = run(&[
        "gpt",
        "build",
        "--input",
        s(&csv),
        "--value-bits",
        "1",
        "--output",
        s(&p(dir.path(), "no/such/dir/out.gpt")),
    ]);
    assert!(!o.status.success());
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    // A value width out of range is refused by the argument parser.
    let o = run(&[
        "gpt",
        "build",
        "--input",
        s(&csv),
        "--value-bits",
        "17",
        "--output",
        s(&gpt),
    ]);
    assert!(!o.status.success());
    assert!(!gpt.exists());
}

#[test]
fn corrupted_or_truncated_gpt_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let csv = p(dir.path(), "k.csv");
    let gpt = p(dir.path(), "k.gpt");
    let body: String = (0..5000u32)
        .map(|i| {
            format!(
                "{},{}\n",
                std::net::Ipv4Addr::from(i.wrapping_mul(2654435761)),
                i % 4
            )
        })
        .collect();
    std::fs::write(&csv, body).unwrap();
    let o = run(&[
        "gpt",
        "build",
        "--input",
        s(&csv),
        "--value-bits",
        "2",
        "--output",
        s(&gpt),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let good = std::fs::read(&gpt).unwrap();
    let bad = p(dir.path(), "bad.gpt");
    let mut r = Rng(3);
    let mut variants: Vec<Vec<u8>> = vec![
        Vec::new(),
        good[..good.len() / 2].to_vec(),
        good[..good.len() - 1].to_vec(),
        b"not a table at all".to_vec(),
    ];
    for _ in 0..6 {
        let mut v = good.clone();
        let i = (r.next() % v.len() as u64) as usize;
        v[i] ^= 1 << (r.next() % 8);
        variants.push(v);
    }
    let mut extended = good.clone();
    extended.extend_from_slice(b"trailing");
    variants.push(extended);
    for (n, v) in variants.iter().enumerate() {
        std::fs::write(&bad, v).unwrap();
        for args in [
            vec!["gpt", "inspect", s(&bad), "--json"],
            vec!["gpt", "lookup", s(&bad), "--input", s(&csv)],
        ] {
            let o = run(&args);
            let err = stderr(&o);
            assert!(!o.status.success(), "variant {n} accepted by {args:?}");
            assert!(
                err.contains("bad.gpt") && err.contains("not a valid GPT file"),
                "{err}"
            );
            assert!(!err.contains("panicked"), "{err}");
            assert!(
                o.stdout.is_empty(),
                "variant {n}: output printed before the error"
            );
        }
    }
}
