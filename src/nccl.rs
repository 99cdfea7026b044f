//! GPU collectives through NCCL: what a trial's workers average their gradients through when
//! their model lives on a GPU and no two ranks share one (ranks that share a device average
//! through the CPU ring instead: NCCL refuses two ranks on one device).
//!
//! NCCL is not linked at build time: `libnccl.so.2` is opened at run time. A GPU worker has
//! opened `libtorch_cuda` (`crate::cuda`), which itself needs `libnccl.so.2` (the PyPI torch
//! wheel ships it, found through libtorch_cuda's rpath), so opening it by that name finds the
//! copy already loaded; a system NCCL works too. A CPU worker never touches it.
//!
//! The communicator is bootstrapped over the CPU ring group: rank 0 makes the NCCL unique id and
//! broadcasts its 128 bytes. Calls are issued on the legacy default CUDA stream (libtorch's
//! default current stream, so they are ordered after the kernels that produced the gradients)
//! and the device is synchronised before returning. A dead peer can leave an NCCL call waiting;
//! the driver kills every rank of a group as soon as any rank dies, which ends the wait.
//! Each worker sees exactly its assigned GPUs (`CUDA_VISIBLE_DEVICES`), so its device is 0.

use std::ffi::{CStr, c_char, c_int, c_void};

use tch::{Kind, Tensor};

use rtune_collective::{CollectiveError, ProcessGroup, ReduceOp, Result};

const UNIQUE_ID_BYTES: usize = 128;
const NCCL_FLOAT32: c_int = 7;
const NCCL_SUM: c_int = 0;
const NCCL_AVG: c_int = 4;

#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueId {
    internal: [c_char; UNIQUE_ID_BYTES],
}

type Comm = *mut c_void;
type Stream = *mut c_void;
/// NCCL's calls shaped `(send, receive, count, datatype, op or root, comm, stream)`.
type Collective =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> c_int;

/// The NCCL entry points rtune uses, resolved from the loaded library.
struct Api {
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> c_int,
    comm_init_rank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> c_int,
    all_reduce: Collective,
    broadcast: Collective,
    /// `ncclReduceScatter(send, recv, recvcount, datatype, op, comm, stream)`.
    reduce_scatter: Collective,
    /// `ncclAllGather(send, recv, sendcount, datatype, comm, stream)`.
    all_gather:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> c_int,
    comm_destroy: unsafe extern "C" fn(Comm) -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    // Keeps the symbols above valid.
    _library: libloading::Library,
}

impl Api {
    fn load() -> Result<Api> {
        let load_error = |e: libloading::Error| CollectiveError::Nccl {
            call: "load",
            message: format!(
                "{e} (NCCL comes with PyTorch's CUDA wheel; was libtorch_cuda opened first?)"
            ),
        };
        // SAFETY: loading NCCL runs its initialisers, which have no preconditions; the symbol
        // types below are NCCL's documented C signatures (nccl.h, NCCL 2.x).
        unsafe {
            let library = libloading::Library::new("libnccl.so.2").map_err(load_error)?;
            macro_rules! symbol {
                ($name:literal) => {
                    *library.get($name).map_err(load_error)?
                };
            }
            Ok(Api {
                get_unique_id: symbol!(b"ncclGetUniqueId\0"),
                comm_init_rank: symbol!(b"ncclCommInitRank\0"),
                all_reduce: symbol!(b"ncclAllReduce\0"),
                broadcast: symbol!(b"ncclBroadcast\0"),
                reduce_scatter: symbol!(b"ncclReduceScatter\0"),
                all_gather: symbol!(b"ncclAllGather\0"),
                comm_destroy: symbol!(b"ncclCommDestroy\0"),
                error_string: symbol!(b"ncclGetErrorString\0"),
                _library: library,
            })
        }
    }

    fn check(&self, call: &'static str, code: c_int) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any code.
        let message = unsafe { CStr::from_ptr((self.error_string)(code)) }.to_string_lossy();
        Err(CollectiveError::Nccl { call, message: format!("{message} (code {code})") })
    }
}

/// An NCCL communicator over the ranks of one worker group.
pub struct NcclGroup {
    api: Api,
    comm: Comm,
    rank: usize,
    world_size: usize,
}

// SAFETY: an NCCL communicator may be used from any one thread at a time; NcclGroup is only
// reachable through `&mut` (one training thread per worker).
unsafe impl Send for NcclGroup {}

impl NcclGroup {
    /// Builds the communicator; every rank calls this at the same point, with the same CPU group.
    pub fn new(bootstrap: &mut dyn ProcessGroup) -> Result<NcclGroup> {
        let api = Api::load()?;
        let (rank, world_size) = (bootstrap.rank(), bootstrap.world_size());
        let mut id = UniqueId { internal: [0; UNIQUE_ID_BYTES] };
        if rank == 0 {
            // SAFETY: `id` is a valid ncclUniqueId to write into.
            api.check("ncclGetUniqueId", unsafe { (api.get_unique_id)(&mut id) })?;
        }
        let mut bytes: Vec<u8> = id.internal.iter().map(|&c| c as u8).collect();
        bootstrap.broadcast_bytes(&mut bytes, 0)?;
        if bytes.len() != UNIQUE_ID_BYTES {
            return Err(CollectiveError::Nccl {
                call: "bootstrap",
                message: format!("unique id of {} bytes, expected {UNIQUE_ID_BYTES}", bytes.len()),
            });
        }
        for (slot, b) in id.internal.iter_mut().zip(&bytes) {
            *slot = *b as c_char;
        }
        let mut comm: Comm = std::ptr::null_mut();
        // SAFETY: `comm` receives the communicator; `id` is the same on every rank.
        let code =
            unsafe { (api.comm_init_rank)(&mut comm, world_size as c_int, id, rank as c_int) };
        api.check("ncclCommInitRank", code)?;
        Ok(NcclGroup { api, comm, rank, world_size })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// Combines a contiguous float32 CUDA tensor across ranks, in place.
    pub fn all_reduce(&mut self, tensor: &Tensor, op: ReduceOp) -> Result<()> {
        let ptr = device_buffer(tensor, "all_reduce")?;
        // In-place all-reduce (send == receive buffer) is allowed by NCCL.
        self.collective("ncclAllReduce", self.api.all_reduce, (ptr, ptr), tensor, nccl_op(op))
    }

    /// Copies `root`'s tensor into every rank's tensor (same shape everywhere), in place.
    pub fn broadcast(&mut self, tensor: &Tensor, root: usize) -> Result<()> {
        let ptr = device_buffer(tensor, "broadcast")?;
        // In-place broadcast is allowed by NCCL.
        self.collective("ncclBroadcast", self.api.broadcast, (ptr, ptr), tensor, root as c_int)
    }

    /// Reduces `input` across ranks and leaves rank `r` the `r`-th of `world_size` equal pieces
    /// of the result in `output` (`input` is `world_size` times `output`'s length).
    pub fn reduce_scatter(&mut self, input: &Tensor, output: &Tensor, op: ReduceOp) -> Result<()> {
        let (send, recv) =
            (device_buffer(input, "reduce_scatter")?, device_buffer(output, "reduce_scatter")?);
        self.check_lengths("reduce_scatter", input, output)?;
        let call = self.api.reduce_scatter;
        self.collective("ncclReduceScatter", call, (send, recv), output, nccl_op(op))
    }

    /// Runs `call` on `buffers` (send, receive) on the default stream, `counted` the tensor
    /// whose length is the call's count and whose device waits for it, `arg` the op or root.
    fn collective(
        &mut self,
        name: &'static str,
        call: Collective,
        (send, recv): (*mut c_void, *mut c_void),
        counted: &Tensor,
        arg: c_int,
    ) -> Result<()> {
        // SAFETY: the callers checked both buffers are contiguous float32 on this rank's device,
        // of the lengths NCCL reads and writes for `counted.numel()`.
        let code = unsafe {
            call(send, recv, counted.numel(), NCCL_FLOAT32, arg, self.comm, std::ptr::null_mut())
        };
        self.api.check(name, code)?;
        synchronize(counted);
        Ok(())
    }

    /// Concatenates every rank's `input` in rank order into `output` (`world_size` times
    /// `input`'s length).
    pub fn all_gather(&mut self, input: &Tensor, output: &Tensor) -> Result<()> {
        let (send, recv) =
            (device_buffer(input, "all_gather")?, device_buffer(output, "all_gather")?);
        self.check_lengths("all_gather", output, input)?;
        // SAFETY: as in `reduce_scatter`, the roles of the two lengths swapped.
        let code = unsafe {
            (self.api.all_gather)(
                send,
                recv,
                input.numel(),
                NCCL_FLOAT32,
                self.comm,
                std::ptr::null_mut(),
            )
        };
        self.api.check("ncclAllGather", code)?;
        synchronize(output);
        Ok(())
    }

    /// `whole` must be `world_size` times as long as `piece`.
    fn check_lengths(&self, call: &'static str, whole: &Tensor, piece: &Tensor) -> Result<()> {
        if whole.numel() == piece.numel() * self.world_size {
            return Ok(());
        }
        Err(CollectiveError::Nccl {
            call,
            message: format!(
                "{} numbers do not cut into {} pieces of {}",
                whole.numel(),
                self.world_size,
                piece.numel()
            ),
        })
    }
}

fn nccl_op(op: ReduceOp) -> c_int {
    match op {
        ReduceOp::Sum => NCCL_SUM,
        ReduceOp::Avg => NCCL_AVG,
    }
}

impl Drop for NcclGroup {
    fn drop(&mut self) {
        // SAFETY: `comm` came from ncclCommInitRank and is destroyed once.
        unsafe { (self.api.comm_destroy)(self.comm) };
    }
}

fn device_buffer(tensor: &Tensor, call: &'static str) -> Result<*mut c_void> {
    if !tensor.device().is_cuda() || tensor.kind() != Kind::Float || !tensor.is_contiguous() {
        return Err(CollectiveError::Nccl {
            call,
            message: format!(
                "needs a contiguous float32 CUDA tensor, got {:?} {:?}",
                tensor.kind(),
                tensor.device()
            ),
        });
    }
    Ok(tensor.data_ptr())
}

fn synchronize(tensor: &Tensor) {
    if let tch::Device::Cuda(index) = tensor.device() {
        tch::Cuda::synchronize(index as i64);
    }
}
