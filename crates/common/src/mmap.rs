//! [`Mmap`]: one memory mapping (anonymous, or of a descriptor the kernel lets map: a packet
//! socket's ring, an AF_XDP ring, a BPF array), unmapped on drop.
//!
//! The one wrapper of `mmap`/`munmap` for kernel-shared regions in scalebricks (sb-io's
//! AF_PACKET and AF_XDP rings and UMEM, sb-xdp's GPT map use it; [`HugeArray`](crate::HugeArray)
//! keeps its own aligned mapping). It hands out a raw pointer only: what lives in the region,
//! and who else (the kernel, a BPF program) reads or writes it concurrently, is the caller's
//! protocol, so every access is the caller's `unsafe` block with its own argument.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::ptr::NonNull;

/// A mapping of `len` bytes, readable and writable, owned by this value and unmapped when it
/// is dropped.
#[derive(Debug)]
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the value only owns the mapping (an address range); it gives out raw pointers, whose
// dereferences are the caller's unsafe code, and munmap may be called from any thread.
unsafe impl Send for Mmap {}
// SAFETY: as above: `&Mmap` exposes only the address and the length.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// A private anonymous mapping of `len` bytes, zero-filled and prefaulted
    /// (`MAP_POPULATE`). Fails with the OS error (`len` 0 is `EINVAL`).
    pub fn anonymous(len: usize) -> io::Result<Mmap> {
        Self::map(
            -1,
            len,
            0,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
        )
    }

    /// A shared mapping of `len` bytes of `fd` from byte `offset` (a multiple of the page size;
    /// for sockets and BPF maps, the object's documented page offset), prefaulted
    /// (`MAP_POPULATE`) when `populate` is set. The kernel checks the descriptor, the length and
    /// the offset; a failure is the OS error. The mapping holds its own reference to the file,
    /// so it stays valid if `fd` is closed first.
    pub fn shared(fd: RawFd, len: usize, offset: u64, populate: bool) -> io::Result<Mmap> {
        let offset = libc::off_t::try_from(offset).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("mmap offset {offset} does not fit off_t"),
            )
        })?;
        let populate = if populate { libc::MAP_POPULATE } else { 0 };
        Self::map(fd, len, offset, libc::MAP_SHARED | populate)
    }

    fn map(fd: RawFd, len: usize, offset: libc::off_t, flags: libc::c_int) -> io::Result<Mmap> {
        // SAFETY: no address hint and no MAP_FIXED, so the kernel picks a fresh range and no
        // existing memory is touched; it validates fd, len and offset and reports failure as
        // MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(Mmap { ptr, len })
    }

    /// The first byte of the mapping (page-aligned). Valid for reads and writes of
    /// [`len`](Mmap::len) bytes while `self` lives; what the bytes mean, and who else accesses
    /// them concurrently, is the caller's to know.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The mapping's length in bytes, as asked for (the kernel maps whole pages).
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping of 0 bytes cannot be made.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: exactly the range mmap returned, unmapped once; a raw pointer the caller kept
        // past drop is the caller's bug (it is documented valid only while `self` lives).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    #[test]
    fn anonymous_is_zeroed_writable_and_readable() {
        let len = 3 * 4096 + 100;
        let m = Mmap::anonymous(len).unwrap();
        assert_eq!(m.len(), len);
        assert!(!m.is_empty());
        assert_eq!(m.as_ptr() as usize % 4096, 0);
        // SAFETY: the mapping is len bytes, ours alone, and lives to the end of the test.
        let s = unsafe { std::slice::from_raw_parts_mut(m.as_ptr(), len) };
        assert!(s.iter().all(|&b| b == 0));
        for (i, b) in s.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        // Read back through the pointer, not the slice.
        for i in [0, 1, 4095, 4096, len - 1] {
            // SAFETY: i < len.
            assert_eq!(unsafe { m.as_ptr().add(i).read() }, (i % 251) as u8);
        }
    }

    #[test]
    fn zero_length_is_an_error_not_a_panic() {
        let e = Mmap::anonymous(0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        let e = Mmap::shared(-1, 4096, 0, false).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        let e = Mmap::shared(-1, 4096, u64::MAX, false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    /// The mapping's lines in /proc/self/maps that name `tag` (a memfd shows as
    /// `/memfd:<name> (deleted)`): no other mapping of the process can carry this name, so the
    /// count is exact even with other tests mapping memory in parallel.
    fn maps_naming(tag: &str) -> usize {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter(|l| l.contains(tag))
            .count()
    }

    #[test]
    fn shared_mapping_sees_the_file_and_drop_unmaps() {
        let tag = "sb-common-mmap-test-drop";
        let name = std::ffi::CString::new(tag).unwrap();
        // SAFETY: a NUL-terminated name; the result is checked before use.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0, "memfd_create: {}", io::Error::last_os_error());
        // SAFETY: raw is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let len = 2 * 4096;
        // SAFETY: plain ftruncate on our descriptor.
        assert_eq!(
            unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) },
            0
        );

        let a = Mmap::shared(fd.as_raw_fd(), len, 0, true).unwrap();
        let b = Mmap::shared(fd.as_raw_fd(), 4096, 4096, false).unwrap();
        assert_eq!(maps_naming(tag), 2);
        // SAFETY: offset 4096 + 7 is inside `a`; `b` maps the file's second page, so offset 7
        // of `b` is the same byte of the file.
        unsafe {
            a.as_ptr().add(4096 + 7).write(0xa5);
            assert_eq!(b.as_ptr().add(7).read(), 0xa5);
        }
        drop(a);
        assert_eq!(maps_naming(tag), 1, "drop unmapped exactly its own range");
        drop(b);
        assert_eq!(maps_naming(tag), 0, "every mapping of the memfd is gone");
        // The file kept the byte written through the mapping.
        let mut byte = [0u8; 1];
        // SAFETY: a one-byte buffer we own.
        let n = unsafe { libc::pread(fd.as_raw_fd(), byte.as_mut_ptr().cast(), 1, 4096 + 7) };
        assert_eq!((n, byte[0]), (1, 0xa5));
    }
}
