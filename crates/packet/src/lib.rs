//! [`PacketBatch`]: a fixed set of reusable packet buffers, the unit every sb-io `Port` receives
//! into and transmits from and the engine processes; and [`Meta`], what travels with each frame.
//!
//! Invariant: no I/O and no dependencies. The batch lives here rather than in sb-io so that the
//! sans-IO engine (sb-engine) does not depend on the crate that makes packet syscalls; sb-io
//! re-exports everything (`sb_io::PacketBatch`, `sb_io::batch::HEADROOM`).
//!
//! A batch owns `capacity` buffers of `buf_size` bytes each, allocated once. A frame lives in one
//! buffer, starting after [`HEADROOM`] bytes so that headers can be prepended in place
//! (encapsulation) and stripped in place (decapsulation) without copying. Frames are addressed
//! through a slot table (`len` active slots, then the idle buffers), so [`PacketBatch::retain`]
//! and [`PacketBatch::swap`] move slot entries, never bytes.
//!
//! Each frame carries a [`Meta`] (the flow hash, the next hop, flags: what VPP keeps in a
//! buffer's opaque area) that moves with it. [`PacketBatch::transfer`] hands a frame to another
//! batch of the same buffer size without copying it: the two batches exchange buffers (the
//! receiver gives one of its idle buffers back), so an engine splits one received batch into
//! per-port output batches by moving pointers. Nothing here allocates after [`PacketBatch::new`].

#![warn(missing_docs)]

/// Bytes reserved in front of every received frame for headers pushed with
/// [`PacketBatch::prepend`] (enough for outer Ethernet + IPv6 + UDP + GTP-U with extensions).
pub const HEADROOM: usize = 128;

/// Default size of one buffer: headroom plus a 1500-byte-MTU frame with a VLAN tag, rounded up.
pub const DEFAULT_BUF_SIZE: usize = 2048;

/// Default number of frames in a batch.
pub const DEFAULT_BATCH: usize = 64;

/// Per-frame metadata that travels with a frame through a batch's stages and through
/// [`PacketBatch::transfer`]. Its meaning is the engine's: sb-packet and sb-io only store it. A frame pushed
/// or received starts with `Meta::default()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// The flow key's 128-bit hash, once computed.
    pub hash: u128,
    /// The next hop (a node index) or output port, as the engine defines it.
    pub next: u16,
    /// Engine-defined flags (which stage the frame is at, hop count, ...).
    pub flags: u16,
    /// Engine-defined word (a drop reason, an offset).
    pub user: u32,
}

#[derive(Debug)]
struct Slot {
    /// The buffer this slot uses (moved, never copied, between batches).
    buf: Box<[u8]>,
    /// Offset of the frame's first byte inside its buffer.
    start: u16,
    /// Frame length in bytes.
    len: u16,
    /// The frame's metadata.
    meta: Meta,
}

/// A batch of up to `capacity` frames in reusable fixed-size buffers.
///
/// ```
/// use sb_packet::PacketBatch;
/// let mut b = PacketBatch::new(4);
/// assert!(b.push(&[1, 2, 3]));
/// b.prepend(0, 2).unwrap()[..2].copy_from_slice(&[9, 9]);
/// assert_eq!(b.get(0), &[9, 9, 1, 2, 3]);
/// b.retain(|f| f.len() > 10);
/// assert!(b.is_empty());
/// ```
pub struct PacketBatch {
    slots: Box<[Slot]>,
    len: usize,
    buf_size: usize,
}

impl std::fmt::Debug for PacketBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketBatch")
            .field("len", &self.len)
            .field("capacity", &self.slots.len())
            .field("buf_size", &self.buf_size)
            .finish()
    }
}

impl PacketBatch {
    /// A batch of `capacity` buffers of [`DEFAULT_BUF_SIZE`] bytes.
    pub fn new(capacity: usize) -> Self {
        Self::with_buf_size(capacity, DEFAULT_BUF_SIZE)
    }

    /// A batch of `capacity` buffers of `buf_size` bytes each (`buf_size` is clamped to
    /// `HEADROOM + 64 ..= 65535`). The largest frame it holds is `buf_size - HEADROOM`.
    pub fn with_buf_size(capacity: usize, buf_size: usize) -> Self {
        let buf_size = buf_size.clamp(HEADROOM + 64, u16::MAX as usize);
        let capacity = capacity.max(1);
        let slots = (0..capacity)
            .map(|_| Slot {
                buf: vec![0u8; buf_size].into_boxed_slice(),
                start: HEADROOM as u16,
                len: 0,
                meta: Meta::default(),
            })
            .collect();
        Self {
            slots,
            len: 0,
            buf_size,
        }
    }

    /// Number of frames in the batch.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the batch holds no frame.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Maximum number of frames.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Free slots left.
    #[inline]
    pub fn room(&self) -> usize {
        self.slots.len() - self.len
    }

    /// True when no more frames fit.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == self.slots.len()
    }

    /// Largest frame a slot holds when pushed (buffer size minus headroom).
    #[inline]
    pub fn max_frame(&self) -> usize {
        self.buf_size - HEADROOM
    }

    /// Size of each buffer.
    #[inline]
    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// Forgets every frame; the buffers stay for reuse.
    #[inline]
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Keeps only the first `n` frames.
    #[inline]
    pub fn truncate_batch(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    #[inline]
    fn frame_of(s: &Slot) -> &[u8] {
        &s.buf[s.start as usize..s.start as usize + s.len as usize]
    }

    /// Frame `i`. Panics if `i >= len()`.
    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        assert!(i < self.len, "frame index out of range");
        Self::frame_of(&self.slots[i])
    }

    /// Frame `i`, writable. Panics if `i >= len()`.
    #[inline]
    pub fn get_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(i < self.len, "frame index out of range");
        let s = &mut self.slots[i];
        &mut s.buf[s.start as usize..s.start as usize + s.len as usize]
    }

    /// Frame `i` with the headroom in front of it: `(buffer, start)` where the frame is
    /// `buffer[start..start + len]`. For in-place encapsulation that writes headers in front.
    #[inline]
    pub fn buffer_mut(&mut self, i: usize) -> (&mut [u8], usize) {
        assert!(i < self.len, "frame index out of range");
        let s = &mut self.slots[i];
        (&mut s.buf[..], s.start as usize)
    }

    /// Sets frame `i` to `buffer[start..start + len]` of its buffer (after writing headers in
    /// front with [`buffer_mut`](Self::buffer_mut)); false, and nothing changed, if that range
    /// is outside the buffer.
    pub fn set_range(&mut self, i: usize, start: usize, len: usize) -> bool {
        assert!(i < self.len, "frame index out of range");
        let s = &mut self.slots[i];
        if start.checked_add(len).is_none_or(|e| e > s.buf.len()) {
            return false;
        }
        s.start = start as u16;
        s.len = len as u16;
        true
    }

    /// Metadata of frame `i`. Panics if `i >= len()`.
    #[inline]
    pub fn meta(&self, i: usize) -> &Meta {
        assert!(i < self.len, "frame index out of range");
        &self.slots[i].meta
    }

    /// Metadata of frame `i`, writable. Panics if `i >= len()`.
    #[inline]
    pub fn meta_mut(&mut self, i: usize) -> &mut Meta {
        assert!(i < self.len, "frame index out of range");
        &mut self.slots[i].meta
    }

    /// Moves frame `i` (bytes, headroom and metadata) to the end of `dst` without copying it:
    /// the buffer changes owner and `dst` gives one of its idle buffers back, which takes the
    /// frame's place here. Frame `i` is then empty (length 0) and still counted in `len()`:
    /// after moving frames out, [`retain_nonempty`](Self::retain_nonempty) or
    /// [`clear`](Self::clear) drops the holes. False, and nothing moved, if `dst` is full or
    /// its buffers have another size.
    pub fn transfer(&mut self, i: usize, dst: &mut PacketBatch) -> bool {
        assert!(i < self.len, "frame index out of range");
        if dst.is_full() || dst.buf_size != self.buf_size {
            return false;
        }
        let j = dst.len;
        let (a, b) = (&mut self.slots[i], &mut dst.slots[j]);
        std::mem::swap(&mut a.buf, &mut b.buf);
        b.start = a.start;
        b.len = a.len;
        b.meta = a.meta;
        a.start = HEADROOM as u16;
        a.len = 0;
        a.meta = Meta::default();
        dst.len += 1;
        true
    }

    /// Drops every empty frame (the holes [`transfer`](Self::transfer) leaves), keeping the
    /// order of the rest; returns how many were dropped.
    pub fn retain_nonempty(&mut self) -> usize {
        let mut w = 0;
        for r in 0..self.len {
            if self.slots[r].len > 0 {
                self.slots.swap(w, r);
                w += 1;
            }
        }
        let removed = self.len - w;
        self.len = w;
        removed
    }

    /// Iterates over the frames in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.len).map(move |i| self.get(i))
    }

    /// Appends a copy of `frame`; false (and nothing appended) if the batch is full or the frame
    /// is longer than [`max_frame`](Self::max_frame).
    #[inline]
    pub fn push(&mut self, frame: &[u8]) -> bool {
        match self.alloc(frame.len()) {
            Some(buf) => {
                buf.copy_from_slice(frame);
                true
            }
            None => false,
        }
    }

    /// Appends a frame of `len` bytes and returns it to be filled (its bytes are whatever the
    /// buffer held before). `None` if full or `len > max_frame()`.
    #[inline]
    pub fn alloc(&mut self, len: usize) -> Option<&mut [u8]> {
        if self.len == self.slots.len() || len > self.max_frame() {
            return None;
        }
        let i = self.len;
        let s = &mut self.slots[i];
        s.start = HEADROOM as u16;
        s.len = len as u16;
        s.meta = Meta::default();
        self.len += 1;
        Some(&mut s.buf[HEADROOM..HEADROOM + len])
    }

    /// Removes the last frame.
    #[inline]
    pub fn pop(&mut self) {
        self.len = self.len.saturating_sub(1);
    }

    /// Grows frame `i` by `n` bytes at the front and returns the whole frame (the new bytes come
    /// first, uninitialised garbage). `None` if the headroom left is smaller than `n`.
    pub fn prepend(&mut self, i: usize, n: usize) -> Option<&mut [u8]> {
        assert!(i < self.len, "frame index out of range");
        let s = &mut self.slots[i];
        if (s.start as usize) < n {
            return None;
        }
        s.start -= n as u16;
        s.len += n as u16;
        Some(self.get_mut(i))
    }

    /// Removes `n` bytes from the front of frame `i`; false if the frame is shorter than `n`.
    pub fn trim_front(&mut self, i: usize, n: usize) -> bool {
        assert!(i < self.len, "frame index out of range");
        let s = &mut self.slots[i];
        if (s.len as usize) < n {
            return false;
        }
        s.start += n as u16;
        s.len -= n as u16;
        true
    }

    /// Sets the length of frame `i` (shrink, or grow into the buffer's tail room); false if it
    /// does not fit in the buffer.
    pub fn set_len(&mut self, i: usize, len: usize) -> bool {
        assert!(i < self.len, "frame index out of range");
        let s = &mut self.slots[i];
        if s.start as usize + len > self.buf_size {
            return false;
        }
        s.len = len as u16;
        true
    }

    /// Swaps frames `i` and `j` (moves two slot entries, not bytes).
    #[inline]
    pub fn swap(&mut self, i: usize, j: usize) {
        assert!(i < self.len && j < self.len, "frame index out of range");
        self.slots.swap(i, j);
    }

    /// Keeps the frames for which `keep` returns true, in their order; returns how many were
    /// removed. Moves slot entries only.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8]) -> bool) -> usize {
        let mut w = 0;
        for r in 0..self.len {
            if keep(Self::frame_of(&self.slots[r])) {
                self.slots.swap(w, r);
                w += 1;
            }
        }
        let removed = self.len - w;
        self.len = w;
        removed
    }

    /// Appends copies of `other`'s frames while room lasts; returns how many were copied.
    pub fn extend_from(&mut self, other: &PacketBatch) -> usize {
        let mut n = 0;
        for f in other.iter() {
            if !self.push(f) {
                break;
            }
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn push_get_prepend_trim() {
        let mut b = PacketBatch::with_buf_size(2, 256);
        assert_eq!(b.max_frame(), 128);
        assert!(!b.push(&[0u8; 129]));
        assert!(b.push(&[1; 128]));
        assert!(b.push(&[2; 3]));
        assert!(!b.push(&[3]));
        assert!(b.is_full());
        assert_eq!(b.get(1), &[2, 2, 2]);
        let f = b.prepend(1, HEADROOM).unwrap();
        assert_eq!(f.len(), HEADROOM + 3);
        assert!(b.prepend(1, 1).is_none());
        assert!(b.trim_front(1, HEADROOM + 1));
        assert_eq!(b.get(1), &[2, 2]);
        assert!(!b.trim_front(1, 3));
        assert!(b.set_len(1, 5));
        assert!(!b.set_len(0, 129));
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn transfer_moves_bytes_headroom_and_meta_without_copying() {
        let mut a = PacketBatch::with_buf_size(4, 512);
        let mut b = PacketBatch::with_buf_size(2, 512);
        for i in 0..3u8 {
            assert!(a.push(&[i; 10]));
            a.meta_mut(i as usize).next = u16::from(i) + 100;
        }
        a.prepend(1, 4).unwrap()[..4].copy_from_slice(&[7; 4]);
        let ptr = a.get(1).as_ptr();
        assert!(a.transfer(1, &mut b));
        assert_eq!(
            b.get(0).as_ptr(),
            ptr,
            "the buffer moved, the bytes were not copied"
        );
        assert_eq!(b.get(0), &[7, 7, 7, 7, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
        assert_eq!(b.meta(0).next, 101);
        assert_eq!(a.get(1), &[] as &[u8]);
        assert_eq!(a.meta(1), &Meta::default());
        assert!(a.transfer(2, &mut b));
        assert!(!a.transfer(0, &mut b), "dst full");
        assert_eq!(a.retain_nonempty(), 2);
        assert_eq!(
            (a.len(), a.get(0), a.meta(0).next),
            (1, &[0u8; 10][..], 100)
        );
        // The buffers a got back are whole and reusable.
        while a.push(&[9; 300]) {}
        assert_eq!(a.len(), 4);
        let mut c = PacketBatch::with_buf_size(2, 1024);
        assert!(!a.transfer(0, &mut c), "different buffer size");
        // set_range: a frame written in front of its headroom.
        let (buf, start) = b.buffer_mut(0);
        buf[start - 2..start].copy_from_slice(&[5, 5]);
        assert!(b.set_range(0, start - 2, 16));
        assert_eq!(&b.get(0)[..3], &[5, 5, 7]);
        assert!(!b.set_range(0, 500, 13));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(Vec<u8>),
        Prepend(usize, u8, usize),
        Trim(usize, usize),
        SetLen(usize, usize),
        Swap(usize, usize),
        RetainOdd,
        Pop,
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => proptest::collection::vec(any::<u8>(), 0..200).prop_map(Op::Push),
            2 => (any::<usize>(), any::<u8>(), 0usize..150).prop_map(|(i, b, n)| Op::Prepend(i, b, n)),
            2 => (any::<usize>(), 0usize..100).prop_map(|(i, n)| Op::Trim(i, n)),
            2 => (any::<usize>(), 0usize..300).prop_map(|(i, n)| Op::SetLen(i, n)),
            1 => (any::<usize>(), any::<usize>()).prop_map(|(i, j)| Op::Swap(i, j)),
            1 => Just(Op::RetainOdd),
            1 => Just(Op::Pop),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        /// Every operation agrees with a `Vec<Vec<u8>>` model that tracks each frame's headroom
        /// and tail room; refusals (full, too long, no headroom) happen exactly when the model
        /// says so.
        #[test]
        fn ops_match_vec_model(ops in proptest::collection::vec(op(), 0..80)) {
            const BUF: usize = 320;
            let mut b = PacketBatch::with_buf_size(8, BUF);
            // (bytes, start offset in the buffer)
            let mut m: Vec<(Vec<u8>, usize)> = Vec::new();
            for o in ops {
                match o {
                    Op::Push(f) => {
                        let ok = m.len() < 8 && f.len() <= BUF - HEADROOM;
                        prop_assert_eq!(b.push(&f), ok);
                        if ok { m.push((f, HEADROOM)); }
                    }
                    Op::Prepend(i, byte, n) if !m.is_empty() => {
                        let i = i % m.len();
                        let ok = m[i].1 >= n;
                        match b.prepend(i, n) {
                            Some(f) => {
                                prop_assert!(ok);
                                f[..n].fill(byte);
                                let mut v = vec![byte; n];
                                v.extend_from_slice(&m[i].0);
                                m[i] = (v, m[i].1 - n);
                            }
                            None => prop_assert!(!ok),
                        }
                    }
                    Op::Trim(i, n) if !m.is_empty() => {
                        let i = i % m.len();
                        let ok = m[i].0.len() >= n;
                        prop_assert_eq!(b.trim_front(i, n), ok);
                        if ok { m[i].0.drain(..n); m[i].1 += n; }
                    }
                    Op::SetLen(i, n) if !m.is_empty() => {
                        let i = i % m.len();
                        let ok = m[i].1 + n <= BUF;
                        prop_assert_eq!(b.set_len(i, n), ok);
                        if ok {
                            // Growing exposes whatever the buffer held: take the batch's bytes.
                            let cur = b.get(i).to_vec();
                            prop_assert_eq!(&cur[..n.min(m[i].0.len())], &m[i].0[..n.min(m[i].0.len())]);
                            m[i].0 = cur;
                        }
                    }
                    Op::Swap(i, j) if !m.is_empty() => {
                        let (i, j) = (i % m.len(), j % m.len());
                        b.swap(i, j);
                        m.swap(i, j);
                    }
                    Op::RetainOdd => {
                        let removed = b.retain(|f| f.len() % 2 == 1);
                        let before = m.len();
                        m.retain(|(f, _)| f.len() % 2 == 1);
                        prop_assert_eq!(removed, before - m.len());
                    }
                    Op::Pop => { b.pop(); m.pop(); }
                    Op::Clear => { b.clear(); m.clear(); }
                    _ => {}
                }
                prop_assert_eq!(b.len(), m.len());
                for (i, (f, _)) in m.iter().enumerate() {
                    prop_assert_eq!(b.get(i), f.as_slice());
                }
            }
        }

        #[test]
        fn retain_matches_vec_filter(frames in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..100), 0..32), modulus in 1usize..5) {
            let mut b = PacketBatch::with_buf_size(32, 256);
            for f in &frames { prop_assert!(b.push(f)); }
            let oracle: Vec<Vec<u8>> = frames.iter().filter(|f| f.len() % modulus == 0).cloned().collect();
            let removed = b.retain(|f| f.len() % modulus == 0);
            prop_assert_eq!(removed, frames.len() - oracle.len());
            let got: Vec<Vec<u8>> = b.iter().map(|f| f.to_vec()).collect();
            prop_assert_eq!(&got, &oracle);
            // Buffers freed by retain are reusable and distinct from the kept ones.
            while b.push(&[0xEE; 7]) {}
            let got2: Vec<Vec<u8>> = b.iter().take(oracle.len()).map(|f| f.to_vec()).collect();
            prop_assert_eq!(&got2, &oracle);
            prop_assert!(b.iter().skip(oracle.len()).all(|f| f == [0xEE; 7]));
        }
    }
}
