//! SDF Filter (TS 29.244 §8.2.5) and the Flow Description it carries: an IPFilterRule of
//! RFC 6733 §4.3.1 as TS 29.212 §5.4.2 restricts it (`permit out` only; `assigned` stands
//! for the UE's address).
//!
//! ```text
//! permit out <proto> from <src> [<ports>] to <dst> [<ports>]
//!   proto: ip | a number 0..=255
//!   src, dst: any | assigned | an IPv4/IPv6 address [/ prefix length]
//!   ports: a port, a range lo-hi, or a comma-separated list of them
//! ```
//! The parser is checked: every byte string gives a value or an error, never a panic
//! (proptest here, and the `sdf_filter` fuzz target).

use std::net::IpAddr;

/// The SDF Filter's flags (octet 5).
mod flag {
    /// Flow Description present.
    pub const FD: u8 = 0x01;
    /// ToS Traffic Class present.
    pub const TTC: u8 = 0x02;
    /// Security Parameter Index present.
    pub const SPI: u8 = 0x04;
    /// Flow Label present.
    pub const FL: u8 = 0x08;
    /// SDF Filter ID present.
    pub const BID: u8 = 0x10;
}

/// Why an SDF Filter or a Flow Description was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SdfError {
    /// The IE is shorter than its flags say.
    #[error("SDF Filter shorter than its flags say")]
    Length,
    /// The flow description is not text.
    #[error("flow description is not UTF-8")]
    Text,
    /// A word of the flow description is not what the grammar allows there.
    #[error("flow description: {0}")]
    Syntax(&'static str),
}

/// One end of a flow: an address (with its prefix) or the UE's (`assigned`), or any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Any address.
    Any,
    /// The UE's address(es).
    Assigned,
    /// The addresses of a prefix.
    Net(IpAddr, u8),
}

/// A Flow Description (RFC 6733 IPFilterRule as TS 29.212 allows it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowDescription {
    /// The IP protocol, or `None` for `ip` (any).
    pub protocol: Option<u8>,
    /// The source (the remote end for `permit out`).
    pub src: Endpoint,
    /// Source port ranges (inclusive); empty: any.
    pub src_ports: Vec<(u16, u16)>,
    /// The destination (`assigned`, the UE, for `permit out`).
    pub dst: Endpoint,
    /// Destination port ranges (inclusive); empty: any.
    pub dst_ports: Vec<(u16, u16)>,
}

/// An SDF Filter IE's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SdfFilter {
    /// The flow description, when present.
    pub flow: Option<FlowDescription>,
    /// ToS / traffic class and mask, when present.
    pub tos: Option<[u8; 2]>,
    /// Security parameter index, when present.
    pub spi: Option<u32>,
    /// Flow label (20 bits), when present.
    pub flow_label: Option<u32>,
    /// SDF Filter ID, when present.
    pub filter_id: Option<u32>,
}

impl SdfFilter {
    /// Reads an SDF Filter IE's value.
    pub fn read(v: &[u8]) -> Result<SdfFilter, SdfError> {
        let flags = *v.first().ok_or(SdfError::Length)?;
        let mut rest = v.get(2..).ok_or(SdfError::Length)?;
        let mut take = |n: usize| -> Result<&[u8], SdfError> {
            if rest.len() < n {
                return Err(SdfError::Length);
            }
            let (a, b) = rest.split_at(n);
            rest = b;
            Ok(a)
        };
        let mut f = SdfFilter {
            flow: None,
            tos: None,
            spi: None,
            flow_label: None,
            filter_id: None,
        };
        if flags & flag::FD != 0 {
            let l = take(2)?;
            let n = usize::from(u16::from_be_bytes([l[0], l[1]]));
            let text = std::str::from_utf8(take(n)?).map_err(|_| SdfError::Text)?;
            f.flow = Some(FlowDescription::parse(text)?);
        }
        if flags & flag::TTC != 0 {
            let t = take(2)?;
            f.tos = Some([t[0], t[1]]);
        }
        if flags & flag::SPI != 0 {
            let s = take(4)?;
            f.spi = Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]));
        }
        if flags & flag::FL != 0 {
            let s = take(3)?;
            f.flow_label = Some(u32::from_be_bytes([0, s[0] & 0x0f, s[1], s[2]]));
        }
        if flags & flag::BID != 0 {
            let s = take(4)?;
            f.filter_id = Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]));
        }
        Ok(f)
    }

    /// Whether the filter matches every packet of the UE (what a PDR without one matches):
    /// only a flow description `permit out ip from any to assigned` (or `to any`), with no
    /// ToS, SPI or flow label to match. An SDF Filter ID alone names the filter and matches
    /// nothing by itself.
    pub fn matches_all(&self) -> bool {
        self.tos.is_none()
            && self.spi.is_none()
            && self.flow_label.is_none()
            && self.flow.as_ref().is_some_and(|f| {
                f.protocol.is_none()
                    && f.src == Endpoint::Any
                    && matches!(f.dst, Endpoint::Any | Endpoint::Assigned)
                    && f.src_ports.is_empty()
                    && f.dst_ports.is_empty()
            })
    }
}

impl FlowDescription {
    /// Parses `permit out <proto> from <src> [<ports>] to <dst> [<ports>]`.
    pub fn parse(text: &str) -> Result<FlowDescription, SdfError> {
        let mut words = text.split_ascii_whitespace().peekable();
        let mut want = |w: &'static str, why: &'static str| match words.next() {
            Some(x) if x.eq_ignore_ascii_case(w) => Ok(()),
            _ => Err(SdfError::Syntax(why)),
        };
        want(
            "permit",
            "only `permit` rules are allowed (TS 29.212 5.4.2)",
        )?;
        want("out", "only `out` rules are allowed (TS 29.212 5.4.2)")?;
        let protocol = match words.next() {
            Some(p) if p.eq_ignore_ascii_case("ip") => None,
            Some(p) => Some(p.parse::<u8>().map_err(|_| SdfError::Syntax("protocol"))?),
            None => return Err(SdfError::Syntax("protocol missing")),
        };
        match words.next() {
            Some(x) if x.eq_ignore_ascii_case("from") => {}
            _ => return Err(SdfError::Syntax("`from` expected")),
        }
        let src = endpoint(words.next())?;
        let mut src_ports = Vec::new();
        if let Some(p) = words.peek() {
            if !p.eq_ignore_ascii_case("to") {
                src_ports = ports(p)?;
                words.next();
            }
        }
        match words.next() {
            Some(x) if x.eq_ignore_ascii_case("to") => {}
            _ => return Err(SdfError::Syntax("`to` expected")),
        }
        let dst = endpoint(words.next())?;
        let dst_ports = match words.next() {
            Some(p) => ports(p)?,
            None => Vec::new(),
        };
        if words.next().is_some() {
            // Options (frag, ipoptions, ...) are not allowed in a flow description.
            return Err(SdfError::Syntax("words after the destination"));
        }
        Ok(FlowDescription {
            protocol,
            src,
            src_ports,
            dst,
            dst_ports,
        })
    }
}

fn endpoint(w: Option<&str>) -> Result<Endpoint, SdfError> {
    let w = w.ok_or(SdfError::Syntax("address missing"))?;
    if w.eq_ignore_ascii_case("any") {
        return Ok(Endpoint::Any);
    }
    if w.eq_ignore_ascii_case("assigned") {
        return Ok(Endpoint::Assigned);
    }
    let (addr, len) = match w.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (w, None),
    };
    let addr: IpAddr = addr.parse().map_err(|_| SdfError::Syntax("address"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l
            .parse::<u8>()
            .map_err(|_| SdfError::Syntax("prefix length"))?,
        None => max,
    };
    if len > max {
        return Err(SdfError::Syntax("prefix length"));
    }
    Ok(Endpoint::Net(addr, len))
}

fn ports(w: &str) -> Result<Vec<(u16, u16)>, SdfError> {
    w.split(',')
        .map(|r| {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            let lo = lo.parse::<u16>().map_err(|_| SdfError::Syntax("port"))?;
            let hi = hi.parse::<u16>().map_err(|_| SdfError::Syntax("port"))?;
            if lo > hi {
                return Err(SdfError::Syntax("port range"));
            }
            Ok((lo, hi))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ie(flow: &str) -> Vec<u8> {
        let mut v = vec![flag::FD, 0];
        v.extend_from_slice(&(flow.len() as u16).to_be_bytes());
        v.extend_from_slice(flow.as_bytes());
        v
    }

    #[test]
    fn what_the_smfs_send() {
        // free5GC's default PDRs: matches every packet of the UE.
        let f = SdfFilter::read(&ie("permit out ip from any to assigned")).unwrap();
        assert!(f.matches_all());
        // open5gs's router solicitation PDR: ICMPv6 to all routers.
        let f = SdfFilter::read(&ie("permit out 58 from ff02::2/128 to assigned")).unwrap();
        assert!(!f.matches_all());
        let fd = f.flow.unwrap();
        assert_eq!(fd.protocol, Some(58));
        assert_eq!(fd.src, Endpoint::Net("ff02::2".parse().unwrap(), 128));
        assert_eq!(fd.dst, Endpoint::Assigned);
    }

    #[test]
    fn ports_masks_and_refusals() {
        let fd =
            FlowDescription::parse("permit out 17 from 10.0.0.0/8 1000-2000,53 to assigned 80")
                .unwrap();
        assert_eq!(fd.src, Endpoint::Net("10.0.0.0".parse().unwrap(), 8));
        assert_eq!(fd.src_ports, vec![(1000, 2000), (53, 53)]);
        assert_eq!(fd.dst_ports, vec![(80, 80)]);
        for bad in [
            "deny out ip from any to assigned",
            "permit in ip from any to assigned",
            "permit out 256 from any to assigned",
            "permit out ip from 10.0.0.0/33 to assigned",
            "permit out ip from any 20-10 to assigned",
            "permit out ip from any to assigned frag",
            "permit out ip any to assigned",
            "",
        ] {
            assert!(FlowDescription::parse(bad).is_err(), "{bad}");
        }
        // A flow description longer than the IE.
        let mut v = ie("permit out ip from any to assigned");
        v.pop();
        assert_eq!(SdfFilter::read(&v), Err(SdfError::Length));
        // ToS alone: a filter that does not match everything.
        let f = SdfFilter::read(&[flag::TTC, 0, 0xb8, 0xfc]).unwrap();
        assert_eq!(f.tos, Some([0xb8, 0xfc]));
        assert!(!f.matches_all());
    }

    proptest! {
        /// Outside bytes: a value or an error, never a panic; and flow descriptions built from
        /// the grammar's words parse to what they say.
        #[test]
        fn any_bytes_read_or_fail(v in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = SdfFilter::read(&v);
        }

        #[test]
        fn grammar_words_parse(
            proto in prop_oneof![Just(None), (0u8..=255).prop_map(Some)],
            len in 0u8..=32,
            lo in 0u16..1000, span in 0u16..1000,
        ) {
            let p = proto.map_or("ip".to_string(), |p| p.to_string());
            let text = format!("permit out {p} from 192.0.2.0/{len} {lo}-{} to assigned", lo + span);
            let fd = FlowDescription::parse(&text).unwrap();
            prop_assert_eq!(fd.protocol, proto);
            prop_assert_eq!(fd.src, Endpoint::Net("192.0.2.0".parse().unwrap(), len));
            prop_assert_eq!(fd.src_ports, vec![(lo, lo + span)]);
            prop_assert_eq!(fd.dst, Endpoint::Assigned);
        }
    }
}
