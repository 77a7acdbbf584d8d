//! Records kept as their differences from a record of the same shape.
//!
//! Records of one kind written by one program are mostly alike: an SMF sends every session of
//! a DNN and slice with the same rules, so two packed sessions of one SMF differ in a few fields
//! (the CP SEID, the UE address, the TEIDs, the base station) and the other ~90% of their bytes
//! are the same. [`Shapes`] keeps the first record of each length as a template and every
//! record after it as the runs of bytes where it differs: smf-sim's 148-byte packed session is
//! kept in 19 bytes (`sb_pfcp`'s unit test prints it). A record with no template of its length
//! once [`MAX_TEMPLATES`] are taken is kept whole. The PFCP endpoint keeps its sessions so
//! (`sb_pfcp`), and the cluster's nodes their replicas of the ranges' state records
//! (`sb_control::StateRecords`).
//!
//! A kept encoding is one byte, the template (or [`WHOLE`]), then for a template the runs:
//! each a header, LEB128 of `equal << 2 | code` (`equal`: the count of bytes equal to the
//! template's before the run; `code` 0-2: the run replaces `code + 1` bytes, 3: a LEB128 count
//! follows), then the bytes that replace the template's; the template's bytes after the last
//! run follow unchanged. The two have the same length. A field that changed in its last bytes
//! (a counter's, an address's) costs a one-byte header when the run starts within 31 bytes of
//! the last: smf-sim's session fits malloc's 32-byte chunk instead of its 48-byte one.
//! Templates are never removed (at most [`MAX_TEMPLATES`], each as long as its record), so an
//! encoding stays readable as long as the [`Shapes`] that made it; [`Shapes::templates`] and
//! [`Shapes::from_templates`] carry them to another process.

use std::collections::HashMap;

/// Templates an endpoint keeps (one per packed length); sessions of other lengths are kept
/// whole.
pub const MAX_TEMPLATES: usize = 255;
/// The first byte of a session kept whole.
pub const WHOLE: u8 = 0xff;
/// Bytes of a head ([`Shapes::encode_with_head`]).
pub const HEAD: usize = 6;
/// Heads an endpoint names by index; later ones are kept inline after [`WHOLE`].
pub const MAX_HEADS: usize = 255;

/// The templates of one endpoint.
#[derive(Debug, Default)]
pub struct Shapes {
    templates: Vec<Box<[u8]>>,
    by_len: HashMap<usize, u8>,
    /// Heads kept sessions name by their index (a session's placement: one of a few).
    heads: Vec<[u8; HEAD]>,
    /// Where an encoding is written before it is copied into an allocation of its size (a
    /// vector shrunk into a box keeps the chunk it grew to: glibc does not split off less than
    /// 32 bytes, so 20 bytes grown in a 32-byte vector stayed in a 48-byte chunk).
    scratch: Vec<u8>,
}

impl Shapes {
    /// `packed` for keeping: its differences from the template of its length (which it
    /// becomes when there is none yet and room for one), or itself after [`WHOLE`].
    pub fn encode(&mut self, packed: &[u8]) -> Box<[u8]> {
        self.encode_after(&[], packed).into()
    }

    /// [`Shapes::encode`] after a byte naming `head` (its index among the heads this endpoint
    /// has seen), or [`WHOLE`] and `head` itself once [`MAX_HEADS`] are taken: what a session
    /// keeps beside its rules (its placement) costs a byte in its allocation instead of its
    /// own field beside it.
    pub fn encode_with_head(&mut self, head: [u8; HEAD], packed: &[u8]) -> Box<[u8]> {
        self.encode_with_head_in(head, packed).into()
    }

    /// [`Shapes::encode_with_head`] into this value's scratch buffer, for a caller that copies
    /// it where it keeps it (the endpoint's session slab): no allocation.
    pub fn encode_with_head_in(&mut self, head: [u8; HEAD], packed: &[u8]) -> &[u8] {
        let mut pre = [WHOLE; 1 + HEAD];
        let pre: &[u8] = match self.heads.iter().position(|h| *h == head) {
            Some(i) => {
                pre[0] = i as u8;
                &pre[..1]
            }
            None if self.heads.len() < MAX_HEADS => {
                pre[0] = self.heads.len() as u8;
                self.heads.push(head);
                &pre[..1]
            }
            None => {
                pre[1..].copy_from_slice(&head);
                &pre[..]
            }
        };
        self.encode_after(pre, packed)
    }

    /// Appends the packed session `kept` ([`Shapes::encode_with_head`]) encodes to `out` and
    /// returns its head; `None` when it does not decode (never panics).
    pub fn decode_with_head(&self, kept: &[u8], out: &mut Vec<u8>) -> Option<[u8; HEAD]> {
        let (&i, rest) = kept.split_first()?;
        let (head, rest) = if i == WHOLE {
            let (h, rest) = rest.split_first_chunk::<HEAD>()?;
            (*h, rest)
        } else {
            (*self.heads.get(usize::from(i))?, rest)
        };
        self.decode(rest, out)?;
        Some(head)
    }

    /// [`Shapes::encode`] after the bytes `pre`, in the scratch buffer.
    fn encode_after(&mut self, pre: &[u8], packed: &[u8]) -> &[u8] {
        let id = match self.by_len.get(&packed.len()) {
            Some(&id) => id,
            None if self.templates.len() < MAX_TEMPLATES => {
                let id = self.templates.len() as u8;
                self.templates.push(packed.into());
                self.by_len.insert(packed.len(), id);
                id
            }
            None => {
                let out = &mut self.scratch;
                out.clear();
                out.extend_from_slice(pre);
                out.push(WHOLE);
                out.extend_from_slice(packed);
                return out;
            }
        };
        let t = &self.templates[id as usize];
        let out = &mut self.scratch;
        out.clear();
        out.extend_from_slice(pre);
        out.push(id);
        let (mut i, mut equal) = (0, 0);
        while i < packed.len() {
            if packed[i] == t[i] {
                equal += 1;
                i += 1;
                continue;
            }
            // A run: up to the next two equal bytes in a row (a run's header costs two).
            let start = i;
            while i < packed.len() && (packed[i] != t[i] || differs_within(packed, t, i, 2)) {
                i += 1;
            }
            let n = i - start;
            if n <= 3 {
                put_varint(out, equal << 2 | (n - 1));
            } else {
                put_varint(out, equal << 2 | 3);
                put_varint(out, n);
            }
            out.extend_from_slice(&packed[start..i]);
            equal = 0;
        }
        out
    }

    /// Appends the packed session `kept` encodes to `out`; `None` when it does not decode
    /// (never for what [`Shapes::encode`] gave; never panics).
    pub fn decode(&self, kept: &[u8], out: &mut Vec<u8>) -> Option<()> {
        let (&id, mut rest) = kept.split_first()?;
        if id == WHOLE {
            out.extend_from_slice(rest);
            return Some(());
        }
        let t = self.templates.get(id as usize)?;
        let mut at = 0usize;
        while !rest.is_empty() {
            let h = take_varint(&mut rest)?;
            let equal = h >> 2;
            let n = match h & 3 {
                3 => take_varint(&mut rest)?,
                code => code + 1,
            };
            let end = at.checked_add(equal)?.checked_add(n)?;
            if end > t.len() || n > rest.len() {
                return None;
            }
            out.extend_from_slice(&t[at..at + equal]);
            out.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            at = end;
        }
        out.extend_from_slice(&t[at..]);
        Some(())
    }

    /// The templates, in the order their ids name them (for [`Shapes::from_templates`]).
    pub fn templates(&self) -> impl Iterator<Item = &[u8]> {
        self.templates.iter().map(|t| &t[..])
    }

    /// Shapes holding `templates` (ids in their order), as [`Shapes::templates`] gave them, so
    /// that what the giver's encodings decode here alike; no heads. `None` for more than
    /// [`MAX_TEMPLATES`] or two of one length.
    pub fn from_templates(templates: Vec<Box<[u8]>>) -> Option<Shapes> {
        if templates.len() > MAX_TEMPLATES {
            return None;
        }
        let mut s = Shapes::default();
        for t in templates {
            let id = s.templates.len() as u8;
            if s.by_len.insert(t.len(), id).is_some() {
                return None;
            }
            s.templates.push(t);
        }
        Some(s)
    }

    /// Bytes of the templates (and their index).
    pub fn bytes(&self) -> usize {
        self.templates.iter().map(|t| t.len()).sum::<usize>()
            + self.templates.capacity() * std::mem::size_of::<Box<[u8]>>()
            + self.by_len.capacity() * (std::mem::size_of::<(usize, u8)>() + 1)
            + self.heads.capacity() * HEAD
            + self.scratch.capacity()
    }
}

/// Whether `a` and `b` differ in one of the `n` bytes after `i`.
fn differs_within(a: &[u8], b: &[u8], i: usize, n: usize) -> bool {
    (i + 1..(i + 1 + n).min(a.len())).any(|j| a[j] != b[j])
}

fn put_varint(out: &mut Vec<u8>, mut x: usize) {
    while x >= 0x80 {
        out.push(x as u8 | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

fn take_varint(b: &mut &[u8]) -> Option<usize> {
    let mut x = 0usize;
    for shift in (0..35).step_by(7) {
        let (&c, rest) = b.split_first()?;
        *b = rest;
        x |= usize::from(c & 0x7f) << shift;
        if c & 0x80 == 0 {
            return Some(x);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(s: &mut Shapes, p: &[u8]) -> usize {
        let k = s.encode(p);
        let mut back = Vec::new();
        s.decode(&k, &mut back).expect("decodes");
        assert_eq!(back, p);
        k.len()
    }

    proptest! {
        /// Anything kept reads back as it was, whatever came before it.
        #[test]
        fn kept_sessions_read_back(ps in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..40), 1..40)) {
            let mut s = Shapes::default();
            for p in &ps {
                round_trip(&mut s, p);
            }
            // And still after every template exists.
            for p in &ps {
                let k = s.encode(p);
                let mut back = Vec::new();
                prop_assert!(s.decode(&k, &mut back).is_some());
                prop_assert_eq!(back, p.clone());
            }
        }

        /// A few changed bytes cost a few bytes.
        #[test]
        fn a_near_copy_is_small(t in proptest::collection::vec(any::<u8>(), 50..300),
                                edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..5)) {
            let mut s = Shapes::default();
            round_trip(&mut s, &t);
            let mut p = t.clone();
            for (i, b) in &edits {
                let n = p.len();
                p[i % n] = *b;
            }
            let n = round_trip(&mut s, &p);
            prop_assert!(n <= 1 + edits.len() * 5, "{} bytes for {} edits", n, edits.len());
        }

        /// Any bytes: decoded or refused, never a panic.
        #[test]
        fn any_bytes_decode_or_fail(t in proptest::collection::vec(any::<u8>(), 0..60),
                                    k in proptest::collection::vec(any::<u8>(), 0..60)) {
            let mut s = Shapes::default();
            s.encode(&t);
            let mut out = Vec::new();
            if s.decode(&k, &mut out).is_some() && k.first() == Some(&0) {
                prop_assert_eq!(out.len(), t.len());
            }
        }
    }

    proptest! {
        /// Sessions kept with heads read back with their heads, past the heads named by index
        /// too, and cost one byte more than without a head while an index names it.
        #[test]
        fn heads_read_back(ps in proptest::collection::vec(
            (any::<u16>(), proptest::collection::vec(any::<u8>(), 0..40)), 1..60)) {
            let mut s = Shapes::default();
            let mut plain = Shapes::default();
            let mut kept = Vec::new();
            for (i, (h, p)) in ps.iter().enumerate() {
                // Few heads, and more than MAX_HEADS of them once i passes 30.
                let n = if i < 30 { h % 4 } else { *h };
                let head = [n as u8, (n >> 8) as u8, 10, 2, 0, 1];
                let k = s.encode_with_head(head, p);
                let without = plain.encode(p);
                if s.heads.contains(&head) {
                    prop_assert_eq!(k.len(), without.len() + 1);
                } else {
                    prop_assert_eq!(k.len(), without.len() + 1 + HEAD);
                }
                kept.push((head, k));
            }
            for ((_, p), (head, k)) in ps.iter().zip(&kept) {
                let mut out = Vec::new();
                prop_assert_eq!(s.decode_with_head(k, &mut out), Some(*head));
                prop_assert_eq!(&out, p);
            }
        }

        /// Any bytes as a kept session with a head: decoded or refused, never a panic.
        #[test]
        fn any_bytes_decode_with_a_head_or_fail(t in proptest::collection::vec(any::<u8>(), 0..60),
                                                k in proptest::collection::vec(any::<u8>(), 0..60)) {
            let mut s = Shapes::default();
            s.encode_with_head([1, 0, 10, 2, 0, 1], &t);
            let mut out = Vec::new();
            let _ = s.decode_with_head(&k, &mut out);
        }
    }

    #[test]
    fn templates_carried_to_another_shapes_decode_alike() {
        let mut s = Shapes::default();
        let recs: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 5 + usize::from(i % 4)]).collect();
        let kept: Vec<Box<[u8]>> = recs.iter().map(|r| s.encode(r)).collect();
        let t = Shapes::from_templates(s.templates().map(Box::from).collect()).unwrap();
        for (r, k) in recs.iter().zip(&kept) {
            let mut out = Vec::new();
            t.decode(k, &mut out).unwrap();
            assert_eq!(&out, r);
        }
        assert!(
            Shapes::from_templates(vec![Box::from(&[1u8][..]), Box::from(&[2u8][..])]).is_none()
        );
        assert!(Shapes::from_templates(vec![Box::from(&[][..]); MAX_TEMPLATES + 1]).is_none());
    }

    #[test]
    fn past_the_last_template_sessions_are_kept_whole() {
        let mut s = Shapes::default();
        for len in 0..MAX_TEMPLATES {
            round_trip(&mut s, &vec![7; len]);
        }
        let p = vec![1; MAX_TEMPLATES + 3];
        let k = s.encode(&p);
        assert_eq!(k[0], WHOLE);
        assert_eq!(k.len(), p.len() + 1);
        round_trip(&mut s, &p);
        // A template's own length still diffs.
        assert_eq!(round_trip(&mut s, &[7; 10]), 1);
    }
}
