//! What a frame says: its JSON-RPC envelope(s), read once and borrowing from the frame's bytes. The id is kept as
//! the host wrote it (a string, any number, or null) and echoed as it is; params stay raw until the method table
//! parses them into their type.
//!
//! One path reads every message, with jsonrpsee's types at the members they fit: the version is jsonrpsee's
//! [`TwoPointZero`], the method a `Cow<str>` and the params raw JSON, as in jsonrpsee's `Request`. The envelope
//! itself is not jsonrpsee's `Request`: its `Id` holds only null, a `u64` or a decoded string, so it would refuse
//! `-1.50` or `1e3` (which JSON-RPC allows and the host gets back as written) and lose how a string id was
//! escaped; and a bad member must still be answered under the request's id, which a failed derive cannot give.

use std::borrow::Cow;

use jsonrpsee::types::TwoPointZero;
use serde::Deserialize;
use serde_json::value::RawValue;

/// One message of a frame.
#[derive(Debug)]
pub enum Message<'a> {
    /// A request: it gets an answer.
    Request {
        /// The id, as the host wrote it.
        id: &'a RawValue,
        /// The method.
        method: Cow<'a, str>,
        /// The params' JSON text.
        params: Option<&'a RawValue>,
    },
    /// A notification: no answer.
    Notification {
        /// The method.
        method: Cow<'a, str>,
        /// The params' JSON text.
        params: Option<&'a RawValue>,
    },
    /// A response to something we sent (we send no requests): ignored.
    Response,
    /// Not a valid request: answered `-32600` under `id` (`null` when it had none or a bad one).
    Invalid {
        /// The id to answer under.
        id: &'a RawValue,
        /// Why.
        why: String,
    },
}

/// What a frame holds.
#[derive(Debug)]
pub enum Parsed<'a> {
    /// One message.
    Single(Message<'a>),
    /// A batch (never empty).
    Batch(Vec<Message<'a>>),
    /// Not JSON: answered `-32700`.
    Unparsable(String),
    /// JSON, but neither an object nor a non-empty array: answered `-32600`.
    NotAMessage(&'static str),
}

/// A message's envelope, with every member kept raw (a `null` id is a member, not a missing one).
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "raw_member")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw_member")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw_member")]
    method: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw_member")]
    params: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw_member")]
    result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "raw_member")]
    error: Option<&'a RawValue>,
}

fn raw_member<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// Reads a frame.
pub fn parse(bytes: &[u8]) -> Parsed<'_> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace()).copied();
    match first {
        Some(b'{') => match serde_json::from_slice::<Envelope>(bytes) {
            Ok(env) => Parsed::Single(message(env)),
            Err(e) if e.is_data() => {
                Parsed::Single(Message::Invalid { id: RawValue::NULL, why: format!("invalid request: {e}") })
            }
            Err(e) => Parsed::Unparsable(format!("parse error: {e}")),
        },
        Some(b'[') => match serde_json::from_slice::<Vec<&RawValue>>(bytes) {
            Ok(items) if items.is_empty() => Parsed::NotAMessage("empty batch"),
            Ok(items) => Parsed::Batch(items.into_iter().map(element).collect()),
            Err(e) => Parsed::Unparsable(format!("parse error: {e}")),
        },
        _ => match serde_json::from_slice::<&RawValue>(bytes) {
            Ok(_) => Parsed::NotAMessage("a message must be a JSON object"),
            Err(e) => Parsed::Unparsable(format!("parse error: {e}")),
        },
    }
}

/// One element of a batch (already known to be JSON).
fn element(raw: &RawValue) -> Message<'_> {
    if !raw.get().starts_with('{') {
        return Message::Invalid { id: RawValue::NULL, why: "a message must be a JSON object".into() };
    }
    match serde_json::from_str::<Envelope>(raw.get()) {
        Ok(env) => message(env),
        Err(e) => Message::Invalid { id: RawValue::NULL, why: format!("invalid request: {e}") },
    }
}

fn message(env: Envelope<'_>) -> Message<'_> {
    let invalid = |id: &'static RawValue, why: &str| Message::Invalid { id, why: why.to_owned() };
    let id = match env.id {
        Some(raw) if is_string_number_or_null(raw.get()) => Some(raw),
        Some(_) => return invalid(RawValue::NULL, "id must be a string, a number or null"),
        None => None,
    };
    let reply_id = id.unwrap_or(RawValue::NULL);
    let with_id = |why: &str| Message::Invalid { id: reply_id, why: why.to_owned() };
    let answer_to_us = env.method.is_none() && (env.result.is_some() || env.error.is_some());
    let version_2_0 = env.jsonrpc.is_some_and(|v| serde_json::from_str::<TwoPointZero>(v.get()).is_ok());
    if !version_2_0 {
        return match id {
            _ if answer_to_us => Message::Response,
            Some(_) => with_id("jsonrpc must be \"2.0\""),
            None => Message::Response,
        };
    }
    let method = match env.method.map(|m| method_name(m.get())) {
        Some(Ok(m)) => m,
        Some(Err(_)) => return with_id("method must be a string"),
        None if answer_to_us => return Message::Response,
        None => return with_id("missing method"),
    };
    if let Some(p) = env.params {
        if !p.get().starts_with(['{', '[']) {
            return with_id("params must be an object");
        }
    }
    match id {
        Some(id) => Message::Request { id, method, params: env.params },
        None => Message::Notification { method, params: env.params },
    }
}

/// Whether an id's JSON text is one JSON-RPC allows (an object, array or boolean is not).
fn is_string_number_or_null(text: &str) -> bool {
    text.starts_with(['"', '-']) || text.starts_with(|c: char| c.is_ascii_digit()) || text == "null"
}

/// A method name, borrowed unless it holds escapes (as jsonrpsee's `Request` borrows it).
fn method_name(raw: &str) -> serde_json::Result<Cow<'_, str>> {
    match serde_json::from_str::<&str>(raw) {
        Ok(name) => Ok(Cow::Borrowed(name)),
        Err(_) => serde_json::from_str::<String>(raw).map(Cow::Owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_keeps_its_id_as_written_and_borrows_its_params() {
        let frame = br#"{"jsonrpc":"2.0","id":-1.50,"method":"session/getState","params":{"handle":"h"}}"#;
        let Parsed::Single(Message::Request { id, method, params }) = parse(frame) else { panic!() };
        let got = (id.get(), &*method, params.map(RawValue::get));
        assert_eq!(got, ("-1.50", "session/getState", Some(r#"{"handle":"h"}"#)));
        assert!(matches!(method, Cow::Borrowed(_)), "no copy of the method name");
    }

    #[test]
    fn what_is_not_a_request_is_told_apart() {
        assert!(matches!(parse(b"{not json"), Parsed::Unparsable(_)));
        assert!(matches!(parse(b"42"), Parsed::NotAMessage(_)));
        assert!(matches!(parse(b"[]"), Parsed::NotAMessage("empty batch")));
        assert!(matches!(parse(br#"{"jsonrpc":"2.0","id":1,"result":null}"#), Parsed::Single(Message::Response)));
        let invalid_under = |frame: &[u8]| match parse(frame) {
            Parsed::Single(Message::Invalid { id, .. }) => Some(id.get().to_owned()),
            _ => None,
        };
        assert_eq!(invalid_under(br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#).as_deref(), Some("null"));
        assert_eq!(invalid_under(br#"{"jsonrpc":"2.0","id":7,"method":"x","params":3}"#).as_deref(), Some("7"));
        let Parsed::Batch(items) = parse(br#"[{"jsonrpc":"2.0","method":"initialized"},7]"#) else { panic!() };
        assert!(matches!(items[0], Message::Notification { .. }) && matches!(items[1], Message::Invalid { .. }));
    }

    #[test]
    fn the_version_must_be_the_string_2_0_however_it_is_escaped() {
        let read = |version: &str| {
            let frame = format!(r#"{{"jsonrpc":{version},"id":-0.5e1,"method":"x"}}"#);
            match parse(frame.as_bytes()) {
                Parsed::Single(Message::Request { id, .. }) => format!("request {id}"),
                Parsed::Single(Message::Invalid { id, why }) => format!("invalid under {id}: {why}"),
                other => format!("{other:?}"),
            }
        };
        assert_eq!(read(r#""2.0""#), "request -0.5e1");
        // The string JSON decodes, however it is spelled: jsonrpsee's TwoPointZero reads the decoded string.
        assert_eq!(read(r#""2\u002e0""#), "request -0.5e1");
        for wrong in [r#""1.0""#, "2.0", "null", r#"" 2.0""#] {
            assert_eq!(read(wrong), r#"invalid under -0.5e1: jsonrpc must be "2.0""#, "{wrong}");
        }
        // Without an id nothing may answer, and a reply to us is not ours to judge.
        let no_id = parse(br#"{"jsonrpc":"1.0","method":"x"}"#);
        assert!(matches!(no_id, Parsed::Single(Message::Response)), "{no_id:?}");
    }
}
