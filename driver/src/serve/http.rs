//! The Open Inference Protocol over HTTP/JSON (KServe v2's REST API, as Triton serves it):
//! `GET /v2/health/live`, `/v2/health/ready`, `GET /v2` (the server), `GET
//! /v2/models/{name}[/versions/{v}][/ready]`, `POST .../infer`, and Prometheus' `GET
//! /metrics`. Tensors come as JSON (`data`, flat or nested) or in Triton's binary tensor
//! extension (`Inference-Header-Content-Length`: the JSON, then each tensor's raw bytes), which
//! tritonclient sends by default. Errors are the protocol's `{"error": "..."}`.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use serde_json::{Value, json};

use super::Front;
use super::protocol::{
    Answer, Code, Data, Input, NUMERIC, OutData, Output, Refusal, TensorSpec, decode_raw,
    requested, unknown_datatype,
};

type Reply = Response<Full<Bytes>>;

/// The header that says how long a binary request's (or answer's) JSON part is.
const HEADER_LENGTH: &str = "inference-header-content-length";

/// Answers one HTTP request.
pub(super) async fn answer(
    front: Arc<Front>,
    request: Request<Incoming>,
) -> Result<Reply, Infallible> {
    let started = std::time::Instant::now();
    let _active = front.active();
    let is_infer = request.method() == Method::POST && request.uri().path().ends_with("/infer");
    // From here a batch may wait for it (while its body is read and parsed).
    let _coming = is_infer.then(|| front.replicas.arrival());
    let reply = match route(&front, request).await {
        Ok(reply) => reply,
        Err(refusal) => refused(&refusal, front.retry_after_s()),
    };
    if is_infer {
        front.stats.request("http", reply.status().as_u16(), started.elapsed());
    }
    Ok(reply)
}

async fn route(front: &Arc<Front>, request: Request<Incoming>) -> Result<Reply, Refusal> {
    front.check_token(request.headers().get("authorization").and_then(|v| v.to_str().ok()))?;
    let path = request.uri().path().trim_end_matches('/').to_owned();
    let parts: Vec<&str> = path.split('/').skip(1).collect();
    let get = request.method() == Method::GET;
    match (get, parts.as_slice()) {
        (true, ["metrics"]) => Ok(metrics(front, &request)),
        (true, ["v2", "health", "live"]) => Ok(status(200)),
        (true, ["v2", "health", "ready"]) => Ok(status(if front.ready() { 200 } else { 503 })),
        (true, ["v2"]) => Ok(json_reply(&front.server_metadata())),
        (_, ["v2", "models", name, rest @ ..]) => {
            let (version, rest) = match rest {
                ["versions", version, rest @ ..] => (*version, rest),
                _ => ("", rest),
            };
            let (name, version) = (decode(name), decode(version));
            match (get, rest) {
                (true, []) => {
                    front.model.check_name(&name, &version)?;
                    Ok(json_reply(&model_metadata(front)))
                }
                (true, ["ready"]) => {
                    front.model.check_name(&name, &version)?;
                    Ok(status(if front.ready() { 200 } else { 503 }))
                }
                (false, ["infer"]) if request.method() == Method::POST => {
                    infer(front, &name, &version, request).await
                }
                _ => Err(not_found(&path)),
            }
        }
        _ => Err(not_found(&path)),
    }
}

fn not_found(path: &str) -> Refusal {
    Refusal::new(
        Code::NotFound,
        format!(
            "no route {path}: this server answers the Open Inference Protocol (/v2/health/live, \
             /v2/health/ready, /v2/models/NAME, POST /v2/models/NAME/infer) and /metrics"
        ),
    )
}

/// A path segment with its %-escapes undone.
fn decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn status(code: u16) -> Reply {
    Response::builder().status(code).body(Full::new(Bytes::new())).expect("a valid response")
}

fn json_reply(value: &Value) -> Reply {
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(value.to_string())))
        .expect("a valid response")
}

fn refused(refusal: &Refusal, retry_after_s: u64) -> Reply {
    let mut reply = Response::builder()
        .status(refusal.code.http_status())
        .header("content-type", "application/json");
    match refusal.code {
        Code::Busy => reply = reply.header("retry-after", retry_after_s.to_string()),
        Code::Draining => reply = reply.header("connection", "close"),
        Code::Unauthorized => reply = reply.header("www-authenticate", "Bearer"),
        _ => {}
    }
    let body = json!({ "error": refusal.message }).to_string();
    reply.body(Full::new(Bytes::from(body))).expect("a valid response")
}

fn metrics(front: &Front, request: &Request<Incoming>) -> Reply {
    let text = front.stats.render(&front.replicas.in_flight());
    let (content_type, text) = crate::monitor::exposition(request.headers(), text);
    Response::builder()
        .status(200)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(text)))
        .expect("a valid response")
}

fn spec_json(spec: &TensorSpec) -> Value {
    json!({ "name": spec.name, "datatype": spec.datatype, "shape": spec.shape })
}

fn model_metadata(front: &Front) -> Value {
    let model = &front.model;
    json!({
        "name": model.name,
        "versions": [model.version],
        "platform": model.platform,
        "inputs": model.inputs().iter().map(spec_json).collect::<Vec<_>>(),
        "outputs": model.outputs.iter().map(spec_json).collect::<Vec<_>>(),
        "parameters": { "columns": model.schema.features },
    })
}

async fn infer(
    front: &Arc<Front>,
    name: &str,
    version: &str,
    request: Request<Incoming>,
) -> Result<Reply, Refusal> {
    front.refuse_when_draining()?;
    let limit = front.limits.max_body_bytes;
    let too_large = || {
        Refusal::new(
            Code::TooLarge,
            format!("the request's body is over {limit} bytes (--max-request-mb)"),
        )
    };
    let length = request.headers().get("content-length").and_then(|v| v.to_str().ok());
    if length.and_then(|l| l.parse::<usize>().ok()).is_some_and(|l| l > limit) {
        return Err(too_large());
    }
    let header_length = request
        .headers()
        .get(HEADER_LENGTH)
        .map(|v| {
            v.to_str().ok().and_then(|v| v.parse::<usize>().ok()).ok_or_else(|| {
                Refusal::bad(format!("the {HEADER_LENGTH} header is no whole number"))
            })
        })
        .transpose()?;
    let body = Limited::new(request.into_body(), limit)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                too_large()
            } else {
                Refusal::bad(format!("the request's body could not be read: {e}"))
            }
        })?
        .to_bytes();
    let (head, binary) = match header_length {
        Some(n) if n <= body.len() => body.split_at(n),
        Some(n) => {
            return Err(Refusal::bad(format!(
                "the {HEADER_LENGTH} header says {n} bytes of JSON, but the body has {}",
                body.len()
            )));
        }
        None => (&body[..], &[][..]),
    };
    let parsed = parse_request(head, binary)?;
    let answer = front.infer(name, version, parsed.inputs).await?;
    respond(front, &parsed.id, &parsed.outputs, parsed.binary_output, &answer)
}

/// What an infer request's body says.
struct Parsed {
    id: Option<String>,
    inputs: Vec<Input>,
    /// The outputs asked for, each with whether it comes as binary data.
    outputs: Vec<(String, bool)>,
    /// The request's parameter `binary_data_output`: every output as binary data.
    binary_output: bool,
}

fn parse_request(head: &[u8], mut binary: &[u8]) -> Result<Parsed, Refusal> {
    let body: Value = serde_json::from_slice(head).map_err(|e| {
        Refusal::bad(format!("the request's body is not JSON the protocol reads: {e}"))
    })?;
    let body = body.as_object().ok_or_else(|| {
        Refusal::bad("the request's body is no JSON object: send {\"inputs\": [...]}")
    })?;
    let id = body.get("id").and_then(Value::as_str).map(str::to_owned);
    let binary_output = body
        .get("parameters")
        .and_then(|p| p.get("binary_data_output"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let Some(Value::Array(inputs)) = body.get("inputs") else {
        return Err(Refusal::bad("the request has no `inputs` list"));
    };
    let mut parsed = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        let name = input
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| Refusal::bad(format!("input {i} has no `name`")))?
            .to_owned();
        let datatype = input
            .get("datatype")
            .and_then(Value::as_str)
            .ok_or_else(|| Refusal::bad(format!("input `{name}` has no `datatype`")))?
            .to_owned();
        let shape: Vec<i64> = match input.get("shape").and_then(Value::as_array) {
            Some(dims) => {
                dims.iter().map(|d| d.as_i64()).collect::<Option<_>>().ok_or_else(|| {
                    Refusal::bad(format!("input `{name}`'s shape is not integers"))
                })?
            }
            None => return Err(Refusal::bad(format!("input `{name}` has no `shape`"))),
        };
        let binary_size =
            input.get("parameters").and_then(|p| p.get("binary_data_size")).and_then(Value::as_u64);
        let data = match (binary_size, input.get("data")) {
            (Some(size), _) => {
                let size = size as usize;
                if size > binary.len() {
                    return Err(Refusal::bad(format!(
                        "input `{name}` says {size} bytes of binary data, but {} are left",
                        binary.len()
                    )));
                }
                let (raw, rest) = binary.split_at(size);
                binary = rest;
                decode_raw(&name, &datatype, raw)?
            }
            (None, Some(data)) => json_data(&name, &datatype, data)?,
            (None, None) => {
                return Err(Refusal::bad(format!(
                    "input `{name}` has no `data` (nor binary_data_size)"
                )));
            }
        };
        parsed.push(Input { name, datatype, shape, data });
    }
    let mut outputs = Vec::new();
    if let Some(Value::Array(asked)) = body.get("outputs") {
        for output in asked {
            let name = output
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| Refusal::bad("a requested output has no `name`"))?;
            let binary = output
                .get("parameters")
                .and_then(|p| p.get("binary_data"))
                .and_then(Value::as_bool)
                .unwrap_or(binary_output);
            outputs.push((name.to_owned(), binary));
        }
    }
    Ok(Parsed { id, inputs: parsed, outputs, binary_output })
}

/// An input's JSON `data`, flat or nested, as its datatype reads it.
fn json_data(name: &str, datatype: &str, data: &Value) -> Result<Data, Refusal> {
    let mut flat = Vec::new();
    flatten(data, &mut flat);
    if datatype == "BYTES" {
        let texts = flat
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(Some(s.clone())),
                Value::Null => Ok(None),
                other => Ok(Some(other.to_string())),
            })
            .collect::<Result<_, Refusal>>()?;
        return Ok(Data::Texts(texts));
    }
    if !NUMERIC.iter().any(|(n, _)| *n == datatype) {
        return Err(unknown_datatype(name, datatype));
    }
    let numbers = flat
        .into_iter()
        .map(|v| match v {
            Value::Number(n) => n.as_f64().ok_or(v),
            Value::Bool(b) if datatype == "BOOL" => Ok(f64::from(u8::from(*b))),
            _ => Err(v),
        })
        .collect::<Result<Vec<f64>, &Value>>()
        .map_err(|v| {
            Refusal::bad(format!(
                "input `{name}` holds {v}, which is not a number: its datatype is {datatype} \
                 (strings go in a BYTES input of their column)"
            ))
        })?;
    Ok(Data::Numbers(numbers))
}

fn flatten<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
    match value {
        Value::Array(items) => items.iter().for_each(|v| flatten(v, out)),
        other => out.push(other),
    }
}

fn respond(
    front: &Front,
    id: &Option<String>,
    asked: &[(String, bool)],
    binary_output: bool,
    answer: &Answer,
) -> Result<Reply, Refusal> {
    let names: Vec<String> = asked.iter().map(|(n, _)| n.clone()).collect();
    let outputs = requested(&answer.outputs, &names)?;
    let mut blobs = Vec::new();
    let mut listed = Vec::with_capacity(outputs.len());
    for output in outputs {
        let binary =
            asked.iter().find(|(n, _)| n == output.name).map_or(binary_output, |(_, b)| *b);
        let mut entry = json!({
            "name": output.name,
            "datatype": output.datatype(),
            "shape": output.shape(answer.rows),
        });
        if binary {
            let raw = output.raw();
            entry["parameters"] = json!({ "binary_data_size": raw.len() });
            blobs.push(raw);
        } else {
            entry["data"] = data_json(output);
        }
        listed.push(entry);
    }
    let mut body = json!({
        "model_name": front.model.name,
        "model_version": front.model.version,
        "outputs": listed,
    });
    if let Some(id) = id {
        body["id"] = json!(id);
    }
    let head = body.to_string();
    if blobs.is_empty() {
        return Ok(json_reply(&body));
    }
    let mut bytes = head.clone().into_bytes();
    for blob in blobs {
        bytes.extend_from_slice(&blob);
    }
    Ok(Response::builder()
        .status(200)
        .header("content-type", "application/octet-stream")
        .header(HEADER_LENGTH, head.len().to_string())
        .body(Full::new(Bytes::from(bytes)))
        .expect("a valid response"))
}

fn data_json(output: &Output) -> Value {
    match &output.data {
        // Exactly the f32 (as f64, which JSON numbers are read as), never a rounded text.
        OutData::Floats(v) => Value::from(v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>()),
        OutData::Ints(v) => Value::from(v.clone()),
        OutData::Texts(v) => Value::from(v.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_json_inputs_read_alike() {
        let head = br#"{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 2],
            "parameters": {"binary_data_size": 8}}], "outputs": [{"name": "prediction",
            "parameters": {"binary_data": true}}]}"#;
        let raw: Vec<u8> = [0.5f32, 2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let parsed = parse_request(head, &raw).unwrap();
        assert_eq!(parsed.inputs[0].data, Data::Floats(vec![0.5, 2.0]));
        assert_eq!(parsed.outputs, [("prediction".to_owned(), true)]);
        let json = br#"{"id": "7", "inputs": [{"name": "input", "datatype": "FP32",
            "shape": [1, 2], "data": [[0.5, 2]]}]}"#;
        let parsed = parse_request(json, &[]).unwrap();
        assert_eq!(parsed.inputs[0].data, Data::Numbers(vec![0.5, 2.0]));
        assert_eq!(parsed.id.as_deref(), Some("7"));
    }

    #[test]
    fn bad_bodies_are_named() {
        let bad = |body: &[u8]| parse_request(body, &[]).map(|_| ()).unwrap_err().message;
        assert!(bad(b"{nope").contains("not JSON"));
        assert!(bad(b"[]").contains("no JSON object"));
        assert!(bad(br#"{"inputs": [{"datatype": "FP32"}]}"#).contains("input 0 has no `name`"));
        let e =
            bad(br#"{"inputs": [{"name": "a", "datatype": "FP32", "shape": [1], "data": ["x"]}]}"#);
        assert!(e.contains("input `a` holds \"x\", which is not a number"), "{e}");
        let e =
            bad(br#"{"inputs": [{"name": "a", "datatype": "FP8", "shape": [1], "data": [1]}]}"#);
        assert!(e.contains("`FP8`"), "{e}");
        let e = bad(br#"{"inputs": [{"name": "a", "datatype": "FP32", "shape": [1],
            "parameters": {"binary_data_size": 4}}]}"#);
        assert!(e.contains("4 bytes of binary data, but 0"), "{e}");
    }

    #[test]
    fn escaped_names_are_read() {
        assert_eq!(decode("best%20model"), "best model");
        assert_eq!(decode("a%2"), "a%2");
    }
}
