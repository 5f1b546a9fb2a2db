//! JavaScript's ToString and ToNumber on JSON values, for the places pi coerces: `array.join`, comparisons of
//! a header's `version` with a number, `new Date(value)`.

use crate::session::json::value::{format_js_number, number_value};
use crate::session::json::{JsString, Json};

/// `String(value)` as `Array.prototype.join` applies it to an element: `null` and `undefined` become `""`.
pub fn join_element(value: Option<&Json>) -> JsString {
    match value {
        None | Some(Json::Null) => JsString::new(),
        Some(v) => to_js_string(v),
    }
}

/// `String(value)`.
pub fn to_js_string(value: &Json) -> JsString {
    match value {
        Json::Null => JsString::from("null"),
        Json::Bool(b) => JsString::from(if *b { "true" } else { "false" }),
        Json::Number(n) => {
            let v = number_value(n);
            JsString::from(if v.is_nan() {
                "NaN".to_owned()
            } else if v.is_infinite() {
                if v > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
            } else {
                format_js_number(v)
            })
        }
        Json::String(s) => s.clone(),
        Json::Array(items) => array_to_string(items),
        Json::Object(_) => JsString::from("[object Object]"),
    }
}

/// `String(array)`, i.e. `array.join(",")` with nested arrays joined in place, from a heap stack: an array nested
/// a million deep (which `JSON.parse` accepts) must not overflow the thread's stack. (V8 throws a `RangeError`
/// somewhere past a few thousand levels; here the string is simply built.)
fn array_to_string(items: &[Json]) -> JsString {
    let mut out = JsString::new();
    let mut stack = vec![(items.iter(), true)];
    while let Some((rest, first)) = stack.last_mut() {
        let Some(item) = rest.next() else {
            stack.pop();
            continue;
        };
        if !std::mem::take(first) {
            out.push_str(",");
        }
        match item {
            Json::Null => {}
            Json::Array(inner) => stack.push((inner.iter(), true)),
            other => out.push_js(&to_js_string(other)),
        }
    }
    out
}

/// `items.join(separator)`.
pub fn join<'a>(items: impl Iterator<Item = Option<&'a Json>>, separator: &str) -> JsString {
    let mut out = JsString::new();
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push_str(separator);
        }
        out.push_js(&join_element(item));
    }
    out
}

/// `Number(value)` (`undefined` is None → NaN).
pub fn to_number(value: Option<&Json>) -> f64 {
    match value {
        None => f64::NAN,
        Some(Json::Null) => 0.0,
        Some(Json::Bool(b)) => f64::from(u8::from(*b)),
        Some(Json::Number(n)) => number_value(n),
        Some(Json::String(s)) => string_to_number(s),
        Some(v @ Json::Array(_)) => string_to_number(&to_js_string(v)),
        Some(Json::Object(_)) => f64::NAN,
    }
}

/// ECMAScript StringToNumber: white space trimmed, `""` is 0, decimal literals, `Infinity`, and `0x`/`0o`/`0b`
/// integers; anything else is NaN.
pub fn string_to_number(s: &JsString) -> f64 {
    let trimmed = s.trim().to_string_lossy();
    let t = trimmed.as_str();
    if t.is_empty() {
        return 0.0;
    }
    for (prefix, radix) in [("0x", 16), ("0X", 16), ("0o", 8), ("0O", 8), ("0b", 2), ("0B", 2)] {
        if let Some(digits) = t.strip_prefix(prefix) {
            if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
                return f64::NAN;
            }
            return digits.chars().fold(0.0, |acc, c| acc * radix as f64 + c.to_digit(radix).unwrap() as f64);
        }
    }
    let (sign, body) = match t.as_bytes()[0] {
        b'+' => (1.0, &t[1..]),
        b'-' => (-1.0, &t[1..]),
        _ => (1.0, t),
    };
    if body == "Infinity" {
        return sign * f64::INFINITY;
    }
    // StrUnsignedDecimalLiteral: digits with optional fraction and exponent; "1." and ".5" are allowed.
    let b = body.as_bytes();
    let mut i = 0;
    let int_digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    i += int_digits;
    let mut frac_digits = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        i += frac_digits;
    }
    if int_digits + frac_digits == 0 {
        return f64::NAN;
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        let exp_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp_digits == 0 {
            return f64::NAN;
        }
        i += exp_digits;
    }
    if i != b.len() {
        return f64::NAN;
    }
    sign * body.parse::<f64>().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(s: &str) -> f64 {
        to_number(Some(&Json::parse(s.as_bytes()).unwrap()))
    }

    #[test]
    fn to_number_follows_ecmascript() {
        assert_eq!(num("\"2\""), 2.0);
        assert_eq!(num("\" 10 \""), 10.0);
        assert_eq!(num("\"\""), 0.0);
        assert_eq!(num("\"0x10\""), 16.0);
        assert_eq!(num("\"1.\""), 1.0);
        assert_eq!(num("\".5\""), 0.5);
        assert!(num("\"abc\"").is_nan());
        assert!(num("\"1e\"").is_nan());
        assert_eq!(num("[2]"), 2.0);
        assert_eq!(num("[]"), 0.0);
        assert!(num("[1,2]").is_nan());
        assert!(num("{}").is_nan());
        assert_eq!(num("true"), 1.0);
        assert_eq!(num("null"), 0.0);
    }

    #[test]
    fn nested_arrays_join_in_place_at_any_depth() {
        let v = Json::parse(br#"[1, [2, [3, null], []], "x"]"#).unwrap();
        assert_eq!(to_js_string(&v).as_str(), Some("1,2,3,,,x"));
        let deep = format!("{}7{}", "[".repeat(200_000), "]".repeat(200_000));
        assert_eq!(to_js_string(&Json::parse(deep.as_bytes()).unwrap()).as_str(), Some("7"));
    }

    #[test]
    fn join_turns_null_elements_into_empty_strings() {
        let v = Json::parse(br#"[null, 1, "a", [2, 3], {}, true]"#).unwrap();
        let Json::Array(items) = &v else { unreachable!() };
        assert_eq!(join(items.iter().map(Some), " ").as_str(), Some(" 1 a 2,3 [object Object] true"));
    }
}
