//! The JSON-RPC 2.0 envelopes this process writes, built from jsonrpsee's types wherever they keep the wire byte
//! for byte: [`TwoPointZero`] is the version member of every message, [`Notification`] is every notification,
//! jsonrpsee's [`ErrorObject`] is every error.
//!
//! Two things jsonrpsee's types cannot carry stay ours, each in one place:
//! - A response's id is the host's JSON text echoed as written (`-1.50`, `1e3`, `"\u0041"`: the tests hold us to
//!   it), and jsonrpsee's `Id` holds only null, a `u64` or a decoded string, so it would write `-1.50` not at all
//!   and `"\u0041"` as `"A"`. A response is therefore [`Success`] or [`Failure`] below: jsonrpsee's
//!   `TwoPointZero` and member order (`jsonrpc`, `id`, then `result` or `error`), with the id as raw JSON.
//! - A large result, or a `session/changed` carrying a snapshot, is streamed: its envelope goes out before its
//!   last member's value is written. That head is cut from the same types serialised with a placeholder value
//!   ([`head`]), so a streamed message and a whole one cannot differ in their envelope.

use std::borrow::Cow;

use jsonrpsee::types::{ErrorObject, Notification, TwoPointZero};
use serde::Serialize;
use serde_json::value::RawValue;

/// A successful response: jsonrpsee's `Response` with the host's id as written.
#[derive(Serialize)]
struct Success<'a, T> {
    jsonrpc: TwoPointZero,
    id: &'a RawValue,
    result: T,
}

/// A failed response: jsonrpsee's `Response` with the host's id as written.
#[derive(Serialize)]
struct Failure<'a> {
    jsonrpc: TwoPointZero,
    id: &'a RawValue,
    error: &'a ErrorObject<'a>,
}

/// What [`head`] serialises as the last member's value, to cut it off again.
const PLACEHOLDER: u8 = 0;

/// A message serialised with [`PLACEHOLDER`] as its last member's value, cut just before that value: what a
/// streamed message writes before the value, which must then be followed by the value and a `}`.
fn head(message: &impl Serialize) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(message).expect("envelopes of plain members serialise");
    // Compact serde_json output ends with `…:0}`: the placeholder, then the closing brace.
    debug_assert!(bytes.ends_with(b":0}"), "the placeholder is the envelope's last member");
    bytes.truncate(bytes.len() - 2);
    bytes
}

/// A response to request `id` with `result`, whole.
pub fn result<T: Serialize + ?Sized>(id: &RawValue, result: &T) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&Success { jsonrpc: TwoPointZero, id, result })
}

/// A response to request `id` up to its result: `{"jsonrpc":"2.0","id":…,"result":`.
pub fn result_head(id: &RawValue) -> Vec<u8> {
    head(&Success { jsonrpc: TwoPointZero, id, result: PLACEHOLDER })
}

/// An error response to request `id` (`null` when the request had none).
pub fn error(id: &RawValue, error: &ErrorObject<'_>) -> Vec<u8> {
    serde_json::to_vec(&Failure { jsonrpc: TwoPointZero, id, error }).expect("error objects serialise")
}

/// A notification, whole.
pub fn notification<T: Serialize + ?Sized>(method: &str, params: &T) -> Vec<u8> {
    serde_json::to_vec(&Notification::new(Cow::Borrowed(method), params)).expect("notifications serialise")
}

/// A notification up to its params: `{"jsonrpc":"2.0","method":…,"params":`.
pub fn notification_head(method: &str) -> Vec<u8> {
    head(&Notification::new(Cow::Borrowed(method), PLACEHOLDER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonrpsee::types::{ErrorObjectOwned, Id, Response, ResponsePayload};

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).expect("test ids are JSON")
    }

    #[test]
    fn a_response_echoes_the_id_as_the_host_wrote_it() {
        for id in ["-1.50", "1e3", r#""\u0041""#, "null", "18446744073709551616"] {
            let text = String::from_utf8(result(&raw(id), &true).expect("serialises")).expect("UTF-8");
            assert_eq!(text, format!(r#"{{"jsonrpc":"2.0","id":{id},"result":true}}"#));
        }
    }

    #[test]
    fn a_response_with_an_id_jsonrpsee_can_hold_is_jsonrpsee_s_response_byte_for_byte() {
        let params = serde_json::json!({"leafId": "a1", "entries": [1, 2.5, "x"]});
        let ours = result(&raw("7"), &params).expect("serialises");
        let theirs = serde_json::to_vec(&Response::new(ResponsePayload::success(params), Id::Number(7))).expect("ok");
        assert_eq!(String::from_utf8(ours), String::from_utf8(theirs));

        let e =
            ErrorObjectOwned::owned(-32601, "no such method", Some(serde_json::json!({"kind": "method_not_found"})));
        let ours = error(&raw(r#""req-1""#), &e);
        let theirs =
            serde_json::to_vec(&Response::<()>::new(ResponsePayload::error(e), Id::Str("req-1".into()))).expect("ok");
        assert_eq!(String::from_utf8(ours), String::from_utf8(theirs));
    }

    #[test]
    fn a_streamed_result_is_the_whole_response_once_its_value_and_brace_follow_the_head() {
        let value = serde_json::json!({"entries": [{"id": "a"}], "more": false});
        let mut streamed = result_head(&raw("-1.50"));
        serde_json::to_writer(&mut streamed, &value).expect("serialises");
        streamed.push(b'}');
        assert_eq!(String::from_utf8(streamed), String::from_utf8(result(&raw("-1.50"), &value).expect("ok")));
        assert_eq!(result_head(&raw("3")), br#"{"jsonrpc":"2.0","id":3,"result":"#);
    }

    #[test]
    fn a_streamed_notification_is_the_whole_notification_once_its_params_and_brace_follow_the_head() {
        let params = raw(r#"{"handle":"h1","seq":4,"change":{"kind":"leaf","leafId":null}}"#);
        let mut streamed = notification_head("session/changed");
        streamed.extend_from_slice(params.get().as_bytes());
        streamed.push(b'}');
        let whole = notification("session/changed", &params);
        assert_eq!(String::from_utf8(streamed), String::from_utf8(whole.clone()));
        assert_eq!(
            String::from_utf8(whole),
            Ok(format!(r#"{{"jsonrpc":"2.0","method":"session/changed","params":{}}}"#, params.get()))
        );
    }
}
