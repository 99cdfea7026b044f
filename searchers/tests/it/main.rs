//! Integration tests of rtune-searchers, one binary: the sweep-file form, properties
//! (proptest), save/restore, an ASHA simulation and TPE against random search.

mod problems;
mod tpe_vs_random;
