//! JSON as pi's JavaScript sees it: validation, values, `JSON.stringify` output, and byte-preserving edits.

pub mod patch;
pub mod scan;
pub mod string;
pub mod value;

pub use string::JsString;
pub use value::{Json, Object};
