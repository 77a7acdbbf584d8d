//! The fuzz targets' entry points (`sb_nf::fuzzing`) on random bytes and on valid frames with a
//! few bytes flipped, on stable.

mod common;
use common::*;
use proptest::prelude::*;
use sb_nf::fuzzing;

fn valid(kind: u8, a: u8, b: u16, payload: &[u8]) -> Vec<u8> {
    let (x, y) = (ip(10, 0, 0, a), ip(203, 0, 113, a ^ 0x55));
    match kind % 6 {
        0 => udp(x, b, y, 53, payload, true),
        1 => udp(x, b, y, 53, payload, false),
        2 => tcp(x, b, y, 80, SYN, payload),
        3 => echo(x, y, b % 2 == 0, b, 1),
        4 => vxlan(x, y, b, u32::from(b), &udp(y, 1, x, 2, payload, true), true),
        _ => vxlan(x, y, b, u32::from(b), &tcp(y, 1, x, 2, ACK, payload), false),
    }
}

fn all(data: &[u8]) {
    fuzzing::nat(data);
    fuzzing::firewall(data);
    fuzzing::lb(data);
    fuzzing::vpn(data);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn random_bytes(data in prop::collection::vec(any::<u8>(), 0..200)) {
        all(&data);
    }

    /// Valid frames (checksums right: translations must keep them right), then mutated.
    #[test]
    fn mutated_frames(
        kind in any::<u8>(), a in any::<u8>(), b in any::<u16>(),
        payload in prop::collection::vec(any::<u8>(), 0..40),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut f = valid(kind, a, b, &payload);
        assert!(fuzzing::checksums_ok(&f));
        all(&f);
        for (i, x) in &flips {
            let n = f.len();
            f[i.index(n)] ^= x;
        }
        all(&f);
        let n = cut.index(f.len() + 1);
        all(&f[..n]);
    }
}
