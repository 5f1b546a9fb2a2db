//! The integration test binary (one binary, as ripgrep does, so the suite links once). Each module covers one
//! area; the `support` module holds the oracle driver and shared helpers.

mod support;

// Differential tests of pi's behaviour against pi 1.6.0 itself.
mod conformance;
mod scenario;

// The command line as people and scripts use it (issue #15).
mod cli;
mod describe;

// JavaScript semantics checked against Node directly.
mod compat;
mod corpus;
mod fuzz_ops;
mod hostile_dirs;
mod hostile_files;
mod index;
mod index_faults;
mod index_identity;
mod index_processes;
mod js_date;
mod js_sort;
mod listing;
mod live;
mod protocol;
mod reads;
mod rpc;
mod rpc_conformance;
mod rpc_faults;
mod rpc_limits;
mod rpc_listing;
mod rpc_live;
mod rpc_memory;
mod rpc_mirror;
mod rpc_open_repair;
mod rpc_order;
mod rpc_search;
mod soak;
mod store_faults;
// The team catalog in PostgreSQL (issue 16).
mod team;
mod tidy;
// Tokens and cost across sessions, against pi's own sums (issue 22).
mod usage;
// `pi-sessiond web` under load and abuse (issue 19).
mod web;
mod write_faults;
mod writers;
mod writes;
