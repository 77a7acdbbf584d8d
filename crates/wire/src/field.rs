//! Big-endian field access on byte slices. Callers check lengths first (views do it once in
//! `new_checked`); these helpers index normally, so a bug shows up as a panic in tests, never as
//! an out-of-bounds read.

#[inline(always)]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline(always)]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline(always)]
pub(crate) fn set_be16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
pub(crate) fn set_be32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
pub(crate) fn arr4(b: &[u8], at: usize) -> [u8; 4] {
    [b[at], b[at + 1], b[at + 2], b[at + 3]]
}

#[inline(always)]
pub(crate) fn arr6(b: &[u8], at: usize) -> [u8; 6] {
    [b[at], b[at + 1], b[at + 2], b[at + 3], b[at + 4], b[at + 5]]
}

#[inline(always)]
pub(crate) fn arr16(b: &[u8], at: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    a
}
