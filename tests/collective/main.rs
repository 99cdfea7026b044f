//! Integration tests of the CPU process group over real TCP on loopback: ranks as threads for
//! correctness and failure handling, ranks as processes for a peer that dies or hangs.

mod common;
mod correctness;
mod failure;
mod process;
