//! An exclusive advisory lock on the log directory (`flock` on its `LOCK` file), so two
//! processes never append to one log. Released when the file is closed (or the process dies).
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Takes the lock without waiting; `Ok(false)` if another open file description holds it.
pub fn try_lock(file: &File) -> io::Result<bool> {
    // SAFETY: flock only reads the descriptor number, which `file` keeps open for the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(err)
    }
}
