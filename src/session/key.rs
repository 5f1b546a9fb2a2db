//! Entry ids as JavaScript `Map` keys.
//!
//! pi indexes entries with `new Map()` keyed by whatever `entry.id` holds. In files pi wrote that is always an
//! 8-hex string, but ids read from files are never validated: a hand-written `"id": 7` is a different key from
//! `"id": "7"`, a missing id is the key `undefined` (and every id-less entry shares it), and `parentId: ""` is
//! falsy, so a parent walk stops there. [`Key`] reproduces `SameValueZero` equality and JavaScript truthiness so
//! that lookups, parent walks and tree building give pi's answers on such files too.

use std::sync::atomic::{AtomicU64, Ordering};

use super::json::value::number_value;
use super::json::{JsString, Json};

/// A JavaScript value used as an id, parent id or label target.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Key {
    /// `undefined`: the member is missing.
    Undefined,
    /// `null`.
    #[default]
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number, by its IEEE bits with -0 folded into +0 (SameValueZero).
    Number(u64),
    /// A string.
    Str(JsString),
    /// An object or array: equal only to itself, so each occurrence gets a fresh identity.
    Object(u64),
}

static NEXT_OBJECT_IDENTITY: AtomicU64 = AtomicU64::new(1);

impl Key {
    /// A string key.
    pub fn str(s: &str) -> Key {
        Key::Str(JsString::from(s))
    }

    /// The key a parsed JSON value denotes. Objects and arrays each get a new identity, as a fresh `JSON.parse`
    /// result would.
    pub fn from_json(value: Option<&Json>) -> Key {
        match value {
            None => Key::Undefined,
            Some(Json::Null) => Key::Null,
            Some(Json::Bool(b)) => Key::Bool(*b),
            Some(Json::Number(n)) => Key::number(number_value(n)),
            Some(Json::String(s)) => Key::Str(s.clone()),
            Some(Json::Array(_) | Json::Object(_)) => Key::fresh_object(),
        }
    }

    /// The key for the raw JSON value `bytes` (a validated value).
    pub fn from_raw(bytes: &[u8]) -> Key {
        match bytes.first() {
            Some(b'"') => Key::Str(super::json::string::decode_string_literal(bytes)),
            Some(b'{' | b'[') => Key::fresh_object(),
            Some(b't') => Key::Bool(true),
            Some(b'f') => Key::Bool(false),
            Some(b'n') => Key::Null,
            Some(_) => Key::number(number_value(std::str::from_utf8(bytes).unwrap_or("NaN"))),
            None => Key::Undefined,
        }
    }

    /// A number key.
    pub fn number(n: f64) -> Key {
        let n = if n == 0.0 { 0.0 } else { n };
        Key::Number(n.to_bits())
    }

    /// An object or array key: a new identity, equal to no other key.
    pub fn fresh_object() -> Key {
        Key::Object(NEXT_OBJECT_IDENTITY.fetch_add(1, Ordering::Relaxed))
    }

    /// JavaScript truthiness (`if (id)`).
    pub fn truthy(&self) -> bool {
        match self {
            Key::Undefined | Key::Null => false,
            Key::Bool(b) => *b,
            Key::Number(bits) => {
                let n = f64::from_bits(*bits);
                n != 0.0 && !n.is_nan()
            }
            Key::Str(s) => !s.is_empty(),
            Key::Object(_) => true,
        }
    }

    /// True for `null` or `undefined` (`value == null`).
    pub fn is_nullish(&self) -> bool {
        matches!(self, Key::Undefined | Key::Null)
    }

    /// The string, if the key is one.
    pub fn as_js_str(&self) -> Option<&JsString> {
        match self {
            Key::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The key as JSON text (`undefined` and objects have none: None).
    pub fn to_json_text(&self) -> Option<String> {
        match self {
            Key::Undefined | Key::Object(_) => None,
            Key::Null => Some("null".into()),
            Key::Bool(b) => Some(b.to_string()),
            Key::Number(bits) => Some(super::json::value::format_js_number(f64::from_bits(*bits))),
            Key::Str(s) => Some(s.to_json()),
        }
    }

    /// How an error message shows the key (`Entry ${id} not found` interpolates it).
    pub fn display(&self) -> String {
        match self {
            Key::Undefined => "undefined".into(),
            Key::Null => "null".into(),
            Key::Bool(b) => b.to_string(),
            Key::Number(bits) => super::json::value::format_js_number(f64::from_bits(*bits)),
            Key::Str(s) => s.to_string_lossy(),
            Key::Object(_) => "[object Object]".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_and_string_ids_are_different_keys() {
        assert_ne!(Key::from_raw(b"7"), Key::from_raw(b"\"7\""));
        assert_eq!(Key::from_raw(b"-0"), Key::from_raw(b"0.0"));
    }

    #[test]
    fn object_ids_equal_only_themselves() {
        let a = Key::from_raw(b"{}");
        assert_ne!(a, Key::from_raw(b"{}"));
        assert_eq!(a.clone(), a);
    }

    #[test]
    fn truthiness_matches_javascript() {
        assert!(!Key::from_raw(b"\"\"").truthy());
        assert!(!Key::from_raw(b"0").truthy());
        assert!(!Key::Undefined.truthy());
        assert!(Key::from_raw(b"\"0\"").truthy());
        assert!(Key::from_raw(b"[]").truthy());
    }
}
