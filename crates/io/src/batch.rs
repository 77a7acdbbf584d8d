//! [`PacketBatch`]: a fixed set of reusable packet buffers, the unit every [`Port`](crate::Port)
//! receives into and transmits from.
//!
//! A batch owns `capacity` buffers of `buf_size` bytes each, allocated once in one contiguous
//! block. A frame lives in one buffer, starting after [`HEADROOM`] bytes so that headers can be
//! prepended in place (encapsulation) and stripped in place (decapsulation) without copying.
//! Frames are addressed through a small slot table (`len` active slots, then the idle buffers), so
//! [`PacketBatch::retain`] and [`PacketBatch::swap`] move 8-byte slot entries, never bytes.
//! Nothing here allocates after [`PacketBatch::new`].

/// Bytes reserved in front of every received frame for headers pushed with
/// [`PacketBatch::prepend`] (enough for outer Ethernet + IPv6 + UDP + GTP-U with extensions).
pub const HEADROOM: usize = 128;

/// Default size of one buffer: headroom plus a 1500-byte-MTU frame with a VLAN tag, rounded up.
pub const DEFAULT_BUF_SIZE: usize = 2048;

/// Default number of frames in a batch.
pub const DEFAULT_BATCH: usize = 64;

#[derive(Clone, Copy, Debug)]
struct Slot {
    /// Index of the buffer this slot uses.
    buf: u32,
    /// Offset of the frame's first byte inside its buffer.
    start: u16,
    /// Frame length in bytes.
    len: u16,
}

/// A batch of up to `capacity` frames in reusable fixed-size buffers.
///
/// ```
/// use sb_io::PacketBatch;
/// let mut b = PacketBatch::new(4);
/// assert!(b.push(&[1, 2, 3]));
/// b.prepend(0, 2).unwrap()[..2].copy_from_slice(&[9, 9]);
/// assert_eq!(b.get(0), &[9, 9, 1, 2, 3]);
/// b.retain(|f| f.len() > 10);
/// assert!(b.is_empty());
/// ```
pub struct PacketBatch {
    data: Box<[u8]>,
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
            .map(|i| Slot {
                buf: i as u32,
                start: HEADROOM as u16,
                len: 0,
            })
            .collect();
        Self {
            data: vec![0u8; capacity * buf_size].into_boxed_slice(),
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
    fn range(&self, i: usize) -> std::ops::Range<usize> {
        let s = self.slots[i];
        let base = s.buf as usize * self.buf_size + s.start as usize;
        base..base + s.len as usize
    }

    /// Frame `i`. Panics if `i >= len()`.
    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        assert!(i < self.len, "frame index out of range");
        &self.data[self.range(i)]
    }

    /// Frame `i`, writable. Panics if `i >= len()`.
    #[inline]
    pub fn get_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(i < self.len, "frame index out of range");
        let r = self.range(i);
        &mut self.data[r]
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
        self.slots[i].start = HEADROOM as u16;
        self.slots[i].len = len as u16;
        self.len += 1;
        let r = self.range(i);
        Some(&mut self.data[r])
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
            let k = {
                let range = self.range(r);
                keep(&self.data[range])
            };
            if k {
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

    /// Raw pointer and length of frame `i`, for backends that hand frames to the kernel.
    #[inline]
    pub(crate) fn raw(&self, i: usize) -> (*const u8, usize) {
        let f = self.get(i);
        (f.as_ptr(), f.len())
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
