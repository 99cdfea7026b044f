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

/// What train functions' places are measured from: a static, which has one address in the
/// binary. (A function would not do: Rust does not promise a function one address, and an
/// optimised build, inlining small functions across crates, gives codegen units copies of
/// their own; an offset taken from one copy led a release build's workers to another place,
/// where they died of SIGSEGV.)
static ANCHOR: u8 = 0;

fn anchor() -> usize {
    std::ptr::addr_of!(ANCHOR) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Context;
    // SAFETY: only this test's function takes it; nothing calls it through a worker.
    unsafe impl TrainContextType for Context {}

    fn train(_: &mut Context) -> anyhow::Result<()> {
        Ok(())
    }

    /// The place a function is sent as leads back to it (the worker's side of the same binary).
    #[test]
    fn a_train_functions_place_leads_back_to_it() {
        let f: fn(&mut Context) -> anyhow::Result<()> = train;
        assert_eq!(TrainFnId::address(TrainFnId::of(f).offset()), f as usize);
        assert_ne!(TrainFnId::of(f), TrainFnId::COMMAND);
    }
}
