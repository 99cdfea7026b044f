//! Integration tests of rtune-searchers, one binary: the sweep-file form, properties
//! (proptest), save/restore, an ASHA simulation and TPE against random search.

mod asha_sim;
mod problems;
mod props;
mod resume;
mod sim;
mod sweep_file;
mod tpe_vs_random;
