//! JavaScript semantics that pi's behaviour depends on.
//!
//! pi is a JavaScript program, and several of its observable results come from the language itself rather than
//! from its own code: how `Date` parses a timestamp, how `Array.prototype.sort` orders elements when a comparator
//! returns `NaN`, how `String.prototype.trim` defines white space. Reproducing pi exactly means reproducing these.

pub mod convert;
pub mod date;
pub mod sort;

pub use convert::{to_js_string, to_number};
