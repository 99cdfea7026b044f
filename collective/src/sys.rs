//! The few places the collective layer needs `unsafe`: viewing element slices as bytes (so
//! tensors go to the socket without a copy) and `setsockopt` for socket buffer sizes; `poll(2)`
//! (std has no readiness API) is `crate::poll`'s. Nothing else in the module uses `unsafe`.

use std::io;
use std::os::fd::AsRawFd;

mod sealed {
    pub(crate) trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u8 {}
}

/// Element types that travel as raw bytes: no padding, and every bit pattern is a valid value.
/// Sealed; implemented for `f32` and `u8` only.
pub(crate) trait Pod: sealed::Sealed + Copy + Default + Send + 'static {
    const SIZE: usize = std::mem::size_of::<Self>();

    /// `dst[i] = dst[i] + src[i]` (then `/ div`) — the only reduction the ring does.
    fn reduce(dst: &mut [Self], src: &[Self], div: Option<f32>);
}

impl Pod for f32 {
    fn reduce(dst: &mut [f32], src: &[f32], div: Option<f32>) {
        // Two separate loops so each auto-vectorises; `+` is commutative in IEEE 754, and the
        // ring fixes which rank adds what in which order, so every rank ends bit-identical.
        match div {
            None => dst.iter_mut().zip(src).for_each(|(d, s)| *d += *s),
            Some(w) => dst.iter_mut().zip(src).for_each(|(d, s)| *d = (*d + *s) / w),
        }
    }
}

impl Pod for u8 {
    fn reduce(_: &mut [u8], _: &[u8], _: Option<f32>) {
        unreachable!("byte collectives never reduce")
    }
}

/// The bytes of an element slice.
pub fn as_bytes<T: Pod>(s: &[T]) -> &[u8] {
    // SAFETY: `T` is f32 or u8 (sealed): no padding, so all `size_of_val(s)` bytes are
    // initialised; u8 needs no alignment; the lifetime is tied to `s`.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}

/// The bytes of a mutable element slice.
pub(crate) fn as_bytes_mut<T: Pod>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; in addition every bit pattern is a valid f32 or u8, so any
    // bytes written through the view leave valid elements behind.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}

pub(crate) const POLLIN: i16 = libc::POLLIN;
pub(crate) const POLLOUT: i16 = libc::POLLOUT;
/// Peer closed its end (Linux); reported even when we are not reading, so a dead neighbour
/// is seen while we only wait to write.
pub(crate) const POLLRDHUP: i16 = libc::POLLRDHUP;
pub(crate) const POLLHUP: i16 = libc::POLLHUP;
pub(crate) const POLLERR: i16 = libc::POLLERR;

pub(crate) use crate::poll::{PollFd, poll};

/// Sets SO_SNDBUF and SO_RCVBUF. The kernel doubles the value and caps it at
/// `net.core.{w,r}mem_max`; setting it also turns off the kernel's buffer autotuning.
pub(crate) fn set_socket_buffers(sock: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    let val = bytes.min(i32::MAX as usize) as libc::c_int;
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: plain setsockopt on a live fd with a pointer to a c_int and its size.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&val as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
