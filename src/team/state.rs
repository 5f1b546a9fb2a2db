//! The listing state a push resumes from, as text in the session row: after an append the next pass feeds only
//! the new lines, as the local catalog index does, instead of reading the whole file again.
//!
//! The state leaves out `allMessagesText`, which is as long as the session's messages: the row's
//! `info_all_messages_text` column already holds it, and a push appends to it there a piece at a time, so its
//! memory does not grow with the session. States written before kept it as `allText`; such a state is read with
//! it, and the next piece writes the column whole.

use crate::catalog::info::InfoState;
use crate::session::json::value::number_value;
use crate::session::json::{JsString, Json, Object};

/// The state as a JSON object (strings as JSON strings, so lone surrogates and NUL survive PostgreSQL text).
pub fn encode(state: &InfoState) -> String {
    let mut o = Object::new();
    if let Some(h) = &state.header {
        o.insert("header", h.clone());
    }
    o.insert("rejected", Json::Bool(state.rejected));
    if let Some(n) = &state.name {
        o.insert("name", Json::String(n.clone()));
    }
    o.insert("messageCount", Json::number(state.message_count as f64));
    o.insert("firstMessage", Json::String(state.first_message.clone()));
    o.insert("hasText", Json::Bool(state.has_text));
    match state.last_activity {
        // NaN sticks once seen (Math.max), and JSON has no NaN.
        Some(t) if t.is_nan() => o.insert("lastActivity", Json::str("NaN")),
        Some(t) => o.insert("lastActivity", Json::number(t)),
        None => {}
    }
    Json::Object(o).to_canonical_string()
}

/// A decoded state, and whether its `allMessagesText` so far is in the row's column rather than in the state.
pub struct Decoded {
    /// The state (its `all_text` empty unless an older push kept it in the state).
    pub state: InfoState,
    /// The text so far is the row's `info_all_messages_text`: new text is appended to it there.
    pub text_in_column: bool,
}

/// The state [`encode`] wrote; a state it cannot read starts over (the caller then sends the file again).
pub fn decode(text: &str) -> Decoded {
    let fresh = || Decoded { state: InfoState::default(), text_in_column: false };
    let Ok(parsed) = Json::parse(text.as_bytes()) else { return fresh() };
    let Some(o) = parsed.as_object() else { return fresh() };
    let string = |k: &str| o.get(k).and_then(Json::as_js_str).cloned();
    let number = |k: &str| match o.get(k) {
        Some(Json::Number(n)) => Some(number_value(n)),
        Some(Json::String(s)) if s.eq_str("NaN") => Some(f64::NAN),
        _ => None,
    };
    let state = InfoState {
        header: o.get("header").cloned(),
        rejected: matches!(o.get("rejected"), Some(Json::Bool(true))),
        name: string("name"),
        message_count: number("messageCount").unwrap_or(0.0) as u64,
        first_message: string("firstMessage").unwrap_or_else(JsString::new),
        all_text: string("allText").unwrap_or_else(JsString::new),
        has_text: matches!(o.get("hasText"), Some(Json::Bool(true))),
        last_activity: number("lastActivity"),
    };
    Decoded { state, text_in_column: !o.contains_key("allText") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_survives_its_text_form_including_nan_and_lone_surrogates() {
        let mut s = InfoState::default();
        s.feed(br#"{"type":"session","id":"x","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#, None);
        s.feed(
            br#"{"type":"message","id":"a","timestamp":"nope","message":{"role":"user","content":"hi \ud800 \u0000","timestamp":"x"}}"#,
            None,
        );
        s.feed(br#"{"type":"session_info","id":"b","name":" named "}"#, None);
        s.last_activity = Some(f64::NAN);
        let Decoded { state: back, text_in_column } = decode(&encode(&s));
        assert!(text_in_column);
        assert!(back.all_text.is_empty() && back.has_text, "the text is the column's; that there is some is kept");
        assert_eq!(back.header, s.header);
        assert_eq!(back.name, s.name);
        assert_eq!(back.first_message, s.first_message);
        assert_eq!(back.message_count, 1);
        assert!(back.last_activity.unwrap().is_nan());
        assert_eq!(encode(&back), encode(&s));
    }

    #[test]
    fn a_state_written_with_its_text_is_read_with_it() {
        let old = r#"{"rejected":false,"messageCount":1,"firstMessage":"hi","allText":"hi there","hasText":true}"#;
        let Decoded { state, text_in_column } = decode(old);
        assert!(!text_in_column);
        assert_eq!(state.all_text, JsString::from("hi there"));
    }
}
