//! `poll(2)`, which std has no API for: the collectives wait on their sockets with it (and the
//! driver's `rtune stack` on its pipe).

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// One entry for [`poll`]; `fd < 0` entries are ignored (as in poll(2)).
#[derive(Debug, Clone, Copy)]
#[repr(transparent)]
pub struct PollFd(libc::pollfd);

impl PollFd {
    pub fn new(fd: RawFd, events: i16) -> PollFd {
        PollFd(libc::pollfd { fd, events, revents: 0 })
    }

    pub fn fd(&self) -> RawFd {
        self.0.fd
    }

    pub fn revents(&self) -> i16 {
        self.0.revents
    }
}

/// Waits until one of `fds` is ready or `timeout` passes; returns the number ready (0 on
/// timeout). Retries on EINTR with the time that is left.
pub fn poll(fds: &mut [PollFd], timeout: Duration) -> io::Result<usize> {
    let start = std::time::Instant::now();
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        // Round up so a sub-millisecond remainder still waits instead of spinning.
        let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `PollFd` is `repr(transparent)` over `libc::pollfd`; the pointer and length
        // come from a live, exclusively borrowed slice, so the kernel writes `revents` in bounds.
        let n = unsafe { libc::poll(fds.as_mut_ptr().cast::<libc::pollfd>(), fds.len() as _, ms) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}
