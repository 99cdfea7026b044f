//! A train function as the driver knows it: not the function (its argument, `TrainContext`,
//! is the worker side's) but its place in the binary, which the worker protocol carries.

/// The type a train function is given: `rtune`'s `TrainContext`. A worker process calls its
/// train function, a `fn(&mut C) -> anyhow::Result<()>`, through its place in the binary
/// ([`TrainFnId`]), as a function of that one type.
///
/// # Safety
/// Implemented only for the context type rtune's worker processes hand their train functions.
pub unsafe trait TrainContextType {}

/// A train function as the driver and the worker protocol know it: its place in the binary,
/// as an offset from an anchor function's, which a worker process of the very same binary
/// turns back into the function (the build id proves it is the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainFnId(i64);

impl TrainFnId {
    /// The worker's own train function that runs an executable ([`CommandTrainable`]), which
    /// no offset names.
    pub const COMMAND: TrainFnId = TrainFnId(i64::MIN);

    /// The place of `train_fn`, a function of the train context.
    pub fn of<C: TrainContextType>(train_fn: fn(&mut C) -> anyhow::Result<()>) -> Self {
        TrainFnId(train_fn as usize as i64 - anchor() as i64)
    }

    /// The offset the worker protocol carries.
    pub fn offset(self) -> i64 {
        self.0
    }

    /// The address, in this process, of the function at `offset` (from [`TrainFnId::offset`]
    /// in a process of the same binary).
    pub fn address(offset: i64) -> usize {
        (anchor() as i64 + offset) as usize
    }
}

/// The function train functions' places are measured from: any one of the binary will do, as
/// long as both sides use it.
fn anchor() -> usize {
    anchor as fn() -> usize as usize
}
