//! Reading the UE addresses of a flows file: a CSV whose first column is the UE's IPv4 address
//! (the format `gpt build` reads; other columns are ignored). Blank lines, lines starting with
//! `#`, and a header line (a first data line whose first column is not an address) are skipped.

use std::net::Ipv4Addr;
use std::path::Path;

use crate::TrafficError;

/// Parses the text of a flows file into its UE addresses, in file order.
pub fn parse_flows(text: &str) -> Result<Vec<Ipv4Addr>, TrafficError> {
    let mut out = Vec::new();
    let mut seen_data = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let first = line
            .split(',')
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('"');
        match first.parse::<Ipv4Addr>() {
            Ok(a) => {
                out.push(a);
                seen_data = true;
            }
            Err(_) if !seen_data && out.is_empty() => seen_data = true, // the header
            Err(_) => {
                return Err(TrafficError::Flows(format!(
                    "line {}: first column {first:?} is not an IPv4 address",
                    i + 1
                )))
            }
        }
    }
    if out.is_empty() {
        return Err(TrafficError::Flows(
            "no flows (no line starts with an IPv4 address)".into(),
        ));
    }
    Ok(out)
}

/// Reads and parses a flows file.
pub fn read_flows(path: &Path) -> Result<Vec<Ipv4Addr>, TrafficError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| TrafficError::Flows(format!("{}: {e}", path.display())))?;
    parse_flows(&text).map_err(|e| match e {
        TrafficError::Flows(m) => TrafficError::Flows(format!("{}: {m}", path.display())),
        e => e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_comments_and_extra_columns() {
        let t = "# made by test\nkey,value\n100.64.0.1,3\n\n 100.64.0.2 , 1,x\n# end\n100.64.0.3\n";
        let f = parse_flows(t).unwrap();
        assert_eq!(
            f,
            vec![
                Ipv4Addr::new(100, 64, 0, 1),
                Ipv4Addr::new(100, 64, 0, 2),
                Ipv4Addr::new(100, 64, 0, 3)
            ]
        );
    }

    #[test]
    fn bad_lines_are_errors() {
        assert!(parse_flows("100.64.0.1\nnot-an-ip,1\n").is_err());
        assert!(parse_flows("# only comments\n").is_err());
        assert!(parse_flows("key\n").is_err());
        assert!(parse_flows("::1,2\n100.64.0.1\n").is_ok()); // a header-like first line
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in ".{0,200}") {
            let _ = parse_flows(&s);
        }
    }
}
