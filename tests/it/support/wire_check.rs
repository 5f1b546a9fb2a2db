//! Every message a test sidecar sends is checked against `protocol/`: a response's `result` against its method's
//! result schema, a notification's `params` against its params schema, an error against the error table (code and
//! kind paired as `methods.json` pairs them). The clients' types are generated from the same files, so a field the
//! server writes that the schema does not name — or names differently — fails the test that received it, instead of
//! drifting apart from the hosts silently.
//!
//! The check is stricter than the published schema in one way: an object schema that lists `properties` and says
//! nothing of others is closed here (`additionalProperties: false`), so a renamed optional field is caught too.
//! Types that carry pi's own data through (entries, messages, headers) say `additionalProperties: true` in the schema.
//!
//! A message nested deeper than [`MAX_DEPTH`] (the hostile-input tests send trees 300,000 levels deep) is counted,
//! not checked: the validator recurses, and its shape at such depth is the same shape repeated.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use pi_sessiond::session::json::Json;
use serde_json::Value;

/// The deepest message checked.
const MAX_DEPTH: usize = 512;

/// What a running sidecar has been asked and what it answered that broke the protocol.
#[derive(Default)]
pub struct WireCheck {
    /// Requests sent and not yet answered: the id's JSON text → method.
    pending: Mutex<HashMap<String, String>>,
    /// Each message that broke the protocol, with why.
    violations: Mutex<Vec<String>>,
}

impl WireCheck {
    /// A check shared by a test host's writer and its reader thread.
    pub fn new() -> Arc<WireCheck> {
        Arc::new(WireCheck::default())
    }

    /// Notes the requests in a message the host sent (one request or a batch), so their responses can be checked.
    pub fn sent(&self, msg: &Json) {
        match msg {
            Json::Array(items) => items.iter().for_each(|m| self.sent(m)),
            Json::Object(_) => {
                if let (Some(id), Some(method)) = (msg.get("id"), msg.get("method").and_then(Json::as_js_str)) {
                    let method = method.to_string_lossy();
                    self.pending.lock().unwrap().insert(id.to_canonical_string(), method);
                }
            }
            _ => {}
        }
    }

    /// Notes raw bytes the host wrote (JSONL or one LSP body): whatever parses as a message is noted as sent.
    pub fn sent_raw(&self, bytes: &[u8]) {
        let body = match bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            Some(i) if bytes.starts_with(b"Content-Length") => &bytes[i + 4..],
            _ => bytes,
        };
        for line in body.split(|&b| b == b'\n') {
            if let Ok(msg) = Json::parse(line) {
                self.sent(&msg);
            }
        }
    }

    /// Checks one message the sidecar sent.
    pub fn received(&self, msg: &Json) {
        if let Err(why) = self.check(msg) {
            let text = shortened(msg.to_canonical_string(), 2000);
            self.violations.lock().unwrap().push(format!("{why}\n  in: {text}"));
        }
    }

    /// The violations seen so far, taken (each is reported once).
    pub fn take_violations(&self) -> Vec<String> {
        std::mem::take(&mut *self.violations.lock().unwrap())
    }

    /// Panics with every violation seen so far (each reported once).
    pub fn assert_clean(&self) {
        let found = self.take_violations();
        if !found.is_empty() {
            panic!("the sidecar sent {} message(s) that break protocol/:\n{}", found.len(), found.join("\n"));
        }
    }

    fn check(&self, msg: &Json) -> Result<(), String> {
        if depth(msg) > MAX_DEPTH {
            if let Some(id) = msg.get("id") {
                self.pending.lock().unwrap().remove(&id.to_canonical_string());
            }
            return Ok(());
        }
        if let Json::Array(items) = msg {
            return items.iter().try_for_each(|m| self.check(m));
        }
        let protocol = Protocol::get();
        if let Some(method) = msg.get("method").and_then(Json::as_js_str) {
            let method = method.to_string_lossy();
            if !protocol.notifications.contains_key(&method) {
                return Err(format!("the server sent `{method}`, which protocol/methods.json does not list"));
            }
            let params = msg.get("params").map(to_value).unwrap_or(Value::Null);
            return protocol.validate(&method, &params).map_err(|e| format!("`{method}` params: {e}"));
        }
        let id = msg.get("id").map(Json::to_canonical_string).unwrap_or_default();
        let method = self.pending.lock().unwrap().remove(&id);
        if let Some(error) = msg.get("error") {
            return protocol.check_error(&to_value(error));
        }
        let Some(result) = msg.get("result") else {
            return Err("a response with neither result nor error".into());
        };
        let method = method.ok_or_else(|| format!("a result for id {id}, which no request had"))?;
        if !protocol.results.contains_key(&method) {
            return Err(format!("a result for `{method}`, which has no result schema in protocol/methods.json"));
        }
        protocol.validate(&method, &to_value(result)).map_err(|e| format!("`{method}` result: {e}"))
    }
}

/// protocol/methods.json and schema.json, read once per test binary, with a validator per schema built on first use.
struct Protocol {
    /// The schema's `$defs`, closed as the module comment says.
    defs: Value,
    /// Request method → the schema of its result (references into `defs`).
    results: HashMap<String, Value>,
    /// Server-to-client method → the schema of its params.
    notifications: HashMap<String, Value>,
    /// Error code → its kind.
    error_kinds: HashMap<i64, String>,
    /// A validator per method, built on first use.
    validators: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
}

impl Protocol {
    fn get() -> &'static Protocol {
        static PROTOCOL: OnceLock<Protocol> = OnceLock::new();
        PROTOCOL.get_or_init(|| {
            let dir = super::repo().join("protocol");
            let read = |name: &str| -> Value {
                serde_json::from_slice(&std::fs::read(dir.join(name)).expect(name)).expect(name)
            };
            let (methods, schema) = (read("methods.json"), read("schema.json"));
            let mut defs = schema["$defs"].clone();
            close_objects(&mut defs);
            // methods.json points into schema.json; here both are one document.
            let local = |v: &Value| -> Option<Value> {
                (!v.is_null())
                    .then(|| serde_json::from_str(&v.to_string().replace("\"schema.json#/", "\"#/")).expect("a schema"))
            };
            let (mut results, mut notifications) = (HashMap::new(), HashMap::new());
            for m in methods["methods"].as_array().expect("methods") {
                let name = m["name"].as_str().expect("name").to_owned();
                if m["direction"] == "server-to-client" {
                    notifications.insert(name, local(&m["params"]).expect("notification params"));
                } else if let Some(result) = local(&m["result"]) {
                    results.insert(name, result);
                }
            }
            let error_kinds = methods["errors"]
                .as_array()
                .expect("errors")
                .iter()
                .map(|e| (e["code"].as_i64().expect("code"), e["kind"].as_str().expect("kind").to_owned()))
                .collect();
            Protocol { defs, results, notifications, error_kinds, validators: Mutex::default() }
        })
    }

    /// Checks a method's result (or a notification's params) against its schema.
    fn validate(&self, method: &str, value: &Value) -> Result<(), String> {
        let validator = self.validator(method);
        let errors: Vec<String> = validator
            .iter_errors(value)
            .take(5)
            .map(|e| format!("{} at `{}`", shortened(e.to_string(), 300), e.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    fn validator(&self, method: &str) -> Arc<jsonschema::Validator> {
        let mut validators = self.validators.lock().unwrap();
        validators
            .entry(method.to_owned())
            .or_insert_with(|| {
                let own = self.results.get(method).or_else(|| self.notifications.get(method)).expect("a method");
                let mut schema = own.clone();
                let doc = schema.as_object_mut().expect("a schema object");
                doc.insert("$schema".into(), "https://json-schema.org/draft/2020-12/schema".into());
                doc.insert("$defs".into(), self.defs.clone());
                Arc::new(jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("schema for {method}: {e}")))
            })
            .clone()
    }

    /// An error object: `code` from the table, a `message`, and `data.kind` (when there is data) the code's kind.
    fn check_error(&self, error: &Value) -> Result<(), String> {
        let code = error["code"].as_i64().ok_or("an error without an integer code")?;
        let kind = self.error_kinds.get(&code).ok_or_else(|| format!("error code {code} is not in the table"))?;
        if !error["message"].is_string() {
            return Err("an error without a message".into());
        }
        match &error["data"] {
            Value::Null => Ok(()),
            Value::Object(data) => match data.get("kind") {
                Some(Value::String(k)) if k == kind => Ok(()),
                Some(other) => Err(format!("error code {code} is `{kind}` in the table, but data.kind is {other}")),
                None => Err(format!("error data without a kind (code {code})")),
            },
            other => Err(format!("error data that is not an object: {other}")),
        }
    }
}

/// Closes every object schema that lists properties and says nothing of others.
fn close_objects(schema: &mut Value) {
    match schema {
        Value::Object(o) => {
            if o.contains_key("properties") && !o.contains_key("additionalProperties") {
                o.insert("additionalProperties".into(), Value::Bool(false));
            }
            o.values_mut().for_each(close_objects);
        }
        Value::Array(items) => items.iter_mut().for_each(close_objects),
        _ => {}
    }
}

/// How deeply a value nests (counted without recursion: the values it is asked about may be very deep).
fn depth(json: &Json) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(json, 1)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Json::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Json::Object(o) => stack.extend(o.iter().map(|(_, i)| (i, d + 1))),
            _ => {}
        }
    }
    deepest
}

/// At most about `max` bytes of `text`, marked when cut.
fn shortened(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// Our JSON as serde's (lone surrogates become U+FFFD: the schema constrains shapes, not string contents).
fn to_value(json: &Json) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(text) => serde_json::from_str(text).unwrap_or(Value::Null),
        Json::String(s) => Value::String(s.to_string_lossy()),
        Json::Array(items) => Value::Array(items.iter().map(to_value).collect()),
        Json::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.to_string_lossy(), to_value(v))).collect()),
    }
}
