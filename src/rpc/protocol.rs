//! The machine-readable contract in `protocol/`: `schema.json` (JSON Schema 2020-12 of every params, result and
//! notification type, generated from the Rust types in `proto`) and `methods.json` (the method table: name,
//! direction, kind, params and result, errors). A test regenerates both and fails if the committed copies differ.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{json, Map, Value};

use super::error;
use super::methods::{specs, PROTOCOL_VERSION};
use super::proto::{CancelParams, NoParams, Progress, SessionChanged, SessionsChanged};

fn reference(schema: schemars::Schema) -> Value {
    // Point `#/$defs/X` references into schema.json, so methods.json can be read on its own.
    let mut v = schema.to_value();
    rewrite_refs(&mut v);
    v
}

fn rewrite_refs(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(r)) = o.get_mut("$ref") {
                if r.starts_with("#/$defs/") {
                    *r = format!("schema.json{r}");
                }
            }
            o.values_mut().for_each(rewrite_refs);
        }
        Value::Array(a) => a.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}

fn notification<T: JsonSchema>(g: &mut SchemaGenerator, name: &str, direction: &str, summary: &str) -> Value {
    json!({
        "name": name,
        "kind": "notification",
        "direction": direction,
        "summary": summary,
        "params": reference(g.subschema_for::<T>()),
    })
}

/// `(methods.json, schema.json)`, as committed under `protocol/`.
pub fn generate() -> (String, String) {
    let mut g = SchemaGenerator::new(SchemaSettings::draft2020_12());
    let mut methods: Vec<Value> = specs()
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "kind": "request",
                "direction": "client-to-server",
                "category": s.category,
                "cancellable": s.cancellable(),
                "summary": s.summary,
                "params": reference((s.params)(&mut g)),
                "result": reference((s.result)(&mut g)),
            })
        })
        .collect();
    methods.push(notification::<NoParams>(&mut g, "initialized", "client-to-server", "Accepted and ignored."));
    methods.push(notification::<NoParams>(
        &mut g,
        "exit",
        "client-to-server",
        "Ends the process: status 0 after `shutdown`, 1 without.",
    ));
    methods.push(notification::<CancelParams>(
        &mut g,
        "$/cancelRequest",
        "client-to-server",
        "Cancels a read in flight (answered with -32800); mutations that have started always finish.",
    ));
    methods.push(notification::<SessionChanged>(
        &mut g,
        "session/changed",
        "server-to-client",
        "After every successful mutation, before its response; `seq` increases by one per change per handle.",
    ));
    methods.push(notification::<SessionsChanged>(
        &mut g,
        "sessions/changed",
        "server-to-client",
        "A session file in a `sessions/watch` directory was created, changed or removed.",
    ));
    methods.push(notification::<Progress>(
        &mut g,
        "$/progress",
        "server-to-client",
        "Progress of a listing or search that passed a `progressToken` (begin, report…, end; a search has a \
         `listing` then an `indexing` stage).",
    ));
    let errors = json!([
        { "code": error::PARSE_ERROR, "kind": "parse_error", "meaning": "The frame is not JSON." },
        { "code": error::INVALID_REQUEST, "kind": "invalid_request", "meaning": "Not a JSON-RPC 2.0 request, or sent after shutdown." },
        { "code": error::METHOD_NOT_FOUND, "kind": "method_not_found", "meaning": "No such method." },
        { "code": error::INVALID_PARAMS, "kind": "invalid_params", "meaning": "A param is missing or has the wrong type; data.path names it." },
        { "code": error::INTERNAL_ERROR, "kind": "internal_error", "meaning": "The server failed; nothing was half-written." },
        { "code": error::REQUEST_CANCELLED, "kind": "request_cancelled", "meaning": "Cancelled by $/cancelRequest." },
        { "code": error::CONTENT_MODIFIED, "kind": "content_modified", "meaning": "expectedLeafId is not the leaf, or another process wrote the file first (data.path); data.leafId is the leaf now." },
        { "code": error::SESSION_NOT_FOUND, "kind": "session_not_found", "meaning": "The file or directory does not exist." },
        { "code": error::ENTRY_NOT_FOUND, "kind": "entry_not_found", "meaning": "No entry has that id." },
        { "code": error::HANDLE_NOT_FOUND, "kind": "handle_not_found", "meaning": "No open session has that handle." },
        { "code": error::INVALID_SESSION_FILE, "kind": "invalid_session_file", "meaning": "Not a pi session, or an entry pi cannot read (data.line)." },
        { "code": error::INVALID_SESSION_ID, "kind": "invalid_session_id", "meaning": "The session id breaks pi's rule." },
        { "code": error::IO_ERROR, "kind": "io_error", "meaning": "The file system failed; data.path names the file." },
        { "code": error::SESSION_LOCKED, "kind": "session_locked", "meaning": "Another process holds the session's write lock; data.pid names it when known." }
    ]);
    let table = json!({
        "protocol": "pi-sessiond",
        "protocolVersion": PROTOCOL_VERSION,
        "framing": ["jsonl", "lsp"],
        "paramStructure": "by-name",
        "methods": methods,
        "errors": errors,
    });
    let defs: Map<String, Value> = g.take_definitions(true);
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://pi-sessiond/protocol/schema.json",
        "title": "pi-sessiond protocol types",
        "$defs": defs,
    });
    let pretty = |v: &Value| serde_json::to_string_pretty(v).expect("JSON") + "\n";
    (pretty(&table), pretty(&schema))
}
