//! The Open Inference Protocol over gRPC (`inference.GRPCInferenceService`): health, metadata
//! and `ModelInfer`, inputs as typed contents or raw little-endian bytes (what tritonclient
//! sends), outputs as raw bytes. Refusals are gRPC statuses: INVALID_ARGUMENT, NOT_FOUND,
//! RESOURCE_EXHAUSTED (a full queue, with `retry-after`), UNAVAILABLE while draining,
//! DEADLINE_EXCEEDED, INTERNAL.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::Front;
use super::protocol::{
    Code, Data, Input, Refusal, TensorSpec, decode_raw, requested, unknown_datatype,
};
use crate::proto::inference as pb;
use pb::grpc_inference_service_server::GrpcInferenceService;

pub(super) struct Service(pub(super) Arc<Front>);

fn status(refusal: Refusal, retry_after_s: u64) -> Status {
    let code = match refusal.code {
        Code::BadRequest => tonic::Code::InvalidArgument,
        Code::NotFound => tonic::Code::NotFound,
        Code::TooLarge | Code::Busy => tonic::Code::ResourceExhausted,
        Code::Draining => tonic::Code::Unavailable,
        Code::Timeout => tonic::Code::DeadlineExceeded,
        Code::Internal => tonic::Code::Internal,
        Code::Unauthorized => tonic::Code::Unauthenticated,
    };
    let mut status = Status::new(code, refusal.message);
    if refusal.code == Code::Busy
        && let Ok(value) = retry_after_s.to_string().parse()
    {
        status.metadata_mut().insert("retry-after", value);
    }
    status
}

fn spec(spec: &TensorSpec) -> pb::model_metadata_response::TensorMetadata {
    pb::model_metadata_response::TensorMetadata {
        name: spec.name.clone(),
        datatype: spec.datatype.to_owned(),
        shape: spec.shape.clone(),
    }
}

impl Service {
    /// The token check of a request's `authorization` metadata.
    fn token<T>(&self, request: &Request<T>) -> Result<(), Refusal> {
        self.0.check_token(request.metadata().get("authorization").and_then(|v| v.to_str().ok()))
    }

    fn authorized<T>(&self, request: &Request<T>) -> Result<(), Status> {
        self.token(request).map_err(|r| self.refuse(r))
    }

    fn refuse(&self, refusal: Refusal) -> Status {
        status(refusal, self.0.retry_after_s())
    }
}

/// A gRPC input's elements: its raw bytes (one entry per input, in order) or its contents.
fn input(
    tensor: pb::model_infer_request::InferInputTensor,
    raw: Option<&Vec<u8>>,
) -> Result<Input, Refusal> {
    let name = tensor.name;
    let datatype = tensor.datatype;
    let data = match raw {
        Some(raw) => decode_raw(&name, &datatype, raw)?,
        None => {
            let c = tensor.contents.unwrap_or_default();
            let numbers = |v: Vec<f64>| Data::Numbers(v);
            match datatype.as_str() {
                "FP32" => Data::Floats(c.fp32_contents),
                "FP64" => numbers(c.fp64_contents),
                "BOOL" => {
                    numbers(c.bool_contents.into_iter().map(|b| f64::from(u8::from(b))).collect())
                }
                "INT8" | "INT16" | "INT32" => {
                    numbers(c.int_contents.into_iter().map(f64::from).collect())
                }
                "INT64" => numbers(c.int64_contents.into_iter().map(|x| x as f64).collect()),
                "UINT8" | "UINT16" | "UINT32" => {
                    numbers(c.uint_contents.into_iter().map(f64::from).collect())
                }
                "UINT64" => numbers(c.uint64_contents.into_iter().map(|x| x as f64).collect()),
                "BYTES" => Data::Texts(
                    c.bytes_contents
                        .into_iter()
                        .map(|b| Some(String::from_utf8_lossy(&b).into_owned()))
                        .collect(),
                ),
                other => return Err(unknown_datatype(&name, other)),
            }
        }
    };
    Ok(Input { name, datatype, shape: tensor.shape, data })
}

#[tonic::async_trait]
impl GrpcInferenceService for Service {
    async fn server_live(
        &self,
        request: Request<pb::ServerLiveRequest>,
    ) -> Result<Response<pb::ServerLiveResponse>, Status> {
        self.authorized(&request)?;
        Ok(Response::new(pb::ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        request: Request<pb::ServerReadyRequest>,
    ) -> Result<Response<pb::ServerReadyResponse>, Status> {
        self.authorized(&request)?;
        Ok(Response::new(pb::ServerReadyResponse { ready: self.0.ready() }))
    }

    async fn model_ready(
        &self,
        request: Request<pb::ModelReadyRequest>,
    ) -> Result<Response<pb::ModelReadyResponse>, Status> {
        self.authorized(&request)?;
        let asked = request.into_inner();
        self.0.model.check_name(&asked.name, &asked.version).map_err(|r| self.refuse(r))?;
        Ok(Response::new(pb::ModelReadyResponse { ready: self.0.ready() }))
    }

    async fn server_metadata(
        &self,
        request: Request<pb::ServerMetadataRequest>,
    ) -> Result<Response<pb::ServerMetadataResponse>, Status> {
        self.authorized(&request)?;
        let (name, version, extensions) = self.0.server();
        Ok(Response::new(pb::ServerMetadataResponse {
            name: name.to_owned(),
            version: version.to_owned(),
            extensions: extensions.iter().map(|e| (*e).to_owned()).collect(),
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        self.authorized(&request)?;
        let asked = request.into_inner();
        let model = &self.0.model;
        model.check_name(&asked.name, &asked.version).map_err(|r| self.refuse(r))?;
        Ok(Response::new(pb::ModelMetadataResponse {
            name: model.name.clone(),
            versions: vec![model.version.clone()],
            platform: model.platform.clone(),
            inputs: model.inputs().iter().map(spec).collect(),
            outputs: model.outputs.iter().map(spec).collect(),
        }))
    }

    async fn model_infer(
        &self,
        request: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Status> {
        let started = std::time::Instant::now();
        let answered = self.infer(request).await;
        let code = match &answered {
            Ok(_) => 200,
            Err(refusal) => refusal.code.http_status(),
        };
        self.0.stats.request("grpc", code, started.elapsed());
        answered.map_err(|r| self.refuse(r))
    }
}

impl Service {
    async fn infer(
        &self,
        request: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Refusal> {
        let _active = self.0.active();
        let _coming = self.0.replicas.arrival();
        self.token(&request)?;
        let asked = request.into_inner();
        let raw = &asked.raw_input_contents;
        if !raw.is_empty() && raw.len() != asked.inputs.len() {
            return Err(Refusal::bad(format!(
                "the request has {} inputs but {} raw_input_contents: give one raw entry per \
                 input, or none and each input's contents",
                asked.inputs.len(),
                raw.len()
            )));
        }
        let inputs = asked
            .inputs
            .into_iter()
            .enumerate()
            .map(|(i, tensor)| input(tensor, raw.get(i)))
            .collect::<Result<Vec<_>, _>>()?;
        let answer = self.0.infer(&asked.model_name, &asked.model_version, inputs).await?;
        let names: Vec<String> = asked.outputs.iter().map(|o| o.name.clone()).collect();
        let outputs = requested(&answer.outputs, &names)?;
        let model = &self.0.model;
        Ok(Response::new(pb::ModelInferResponse {
            model_name: model.name.clone(),
            model_version: model.version.clone(),
            id: asked.id,
            parameters: Default::default(),
            outputs: outputs
                .iter()
                .map(|o| pb::model_infer_response::InferOutputTensor {
                    name: o.name.to_owned(),
                    datatype: o.datatype().to_owned(),
                    shape: o.shape(answer.rows),
                    parameters: Default::default(),
                    contents: None,
                })
                .collect(),
            raw_output_contents: outputs.iter().map(|o| o.raw()).collect(),
        }))
    }
}
