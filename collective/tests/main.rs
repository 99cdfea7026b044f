//! Integration tests of the CPU process group over real TCP on loopback, ranks as threads: for
//! correctness and failure handling. Ranks as processes (a peer that is SIGKILLed or frozen) are
//! in the `integration` binary, whose own `main` can turn the re-executed binary into the peer.

mod common;
mod correctness;
mod failure;
