//! The machine-readable contract in `protocol/`: `schema.json` (JSON Schema 2020-12 of every params, result and
//! notification type, generated from the Rust types in `proto`) and `methods.json` (the method table: name,
//! direction, kind, params and result, errors). A test regenerates both and fails if the committed copies differ.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{json, Map, Value};

use super::error::WireKind;
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
                "category": s.category.as_str(),
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
    // The protocol's own faults, then every kind of engine error from the engine's one table.
    let mut errors: Vec<_> =
        WireKind::all().map(|k| json!({ "code": k.code(), "kind": k.as_str(), "meaning": k.meaning() })).collect();
    errors.sort_by_key(|e| e["code"].as_i64().map(|c| (c > 0, c.abs())));
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
