//! Reading the UE addresses of a flows file: a CSV whose first column is the UE's IPv4 address
//! (other columns are ignored), read by the one key parser, [`crate::keys`]: blank lines, lines
//! starting with `#`, and a header line (a first line of words only, `ue,teid,enb,node`) are
//! skipped; a line whose key is not an IPv4 address is an error naming the line.

use std::net::Ipv4Addr;
use std::path::Path;

use crate::keys::{KeyFileError, KeyKind, Reader};
use crate::TrafficError;

/// Parses the text of a flows file into its UE addresses, in file order.
pub fn parse_flows(text: &str) -> Result<Vec<Ipv4Addr>, TrafficError> {
    flows(Reader::new("<text>", text.as_bytes()))
}

/// Reads and parses a flows file.
pub fn read_flows(path: &Path) -> Result<Vec<Ipv4Addr>, TrafficError> {
    flows(Reader::open(path).map_err(|e| TrafficError::Flows(e.to_string()))?)
}

fn flows(r: Reader<'_>) -> Result<Vec<Ipv4Addr>, TrafficError> {
    let path = r.path().to_path_buf();
    let mut out = Vec::new();
    r.for_each_key(|line, k| match (k.kind, <[u8; 4]>::try_from(&k.key[..])) {
        (KeyKind::Ipv4, Ok(a)) => {
            out.push(Ipv4Addr::from(a));
            Ok(())
        }
        _ => Err(KeyFileError::Malformed {
            path: path.clone(),
            line,
            msg: format!("first column `{}` is not an IPv4 address", k.text),
        }),
    })
    .map_err(|e| TrafficError::Flows(e.to_string()))?;
    if out.is_empty() {
        return Err(TrafficError::Flows(format!(
            "{}: no flows (no line starts with an IPv4 address)",
            path.display()
        )));
    }
    Ok(out)
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
        // An IPv6 key is a key, but not a UE address the generator can send to.
        let e = parse_flows("::1,2\n100.64.0.1\n").unwrap_err().to_string();
        assert!(
            e.contains(":1:") && e.contains("not an IPv4 address"),
            "{e}"
        );
        let e = parse_flows("ue\n100.64.0.1\n100.64.0.300,1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("<text>:3:"), "{e}");
    }

    #[test]
    fn cluster_flows_format() {
        // The cluster's flows file: a header, then UE address, TEID, eNodeB address, node.
        let t = "ue,teid,enb,node\n100.64.0.7,305419896,192.0.2.9,2\n100.64.0.8,305419897,192.0.2.9,0\n";
        assert_eq!(
            parse_flows(t).unwrap(),
            vec![Ipv4Addr::new(100, 64, 0, 7), Ipv4Addr::new(100, 64, 0, 8)]
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("flows.csv");
        std::fs::write(&p, t).unwrap();
        assert_eq!(read_flows(&p).unwrap().len(), 2);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in ".{0,200}") {
            let _ = parse_flows(&s);
        }
    }
}
