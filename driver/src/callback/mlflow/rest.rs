//! MLflow's REST API (`/api/2.0/mlflow/...`): the calls the logger makes.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value as Json, json};

use super::{MAX_PARAM_CHARS, MAX_PARAMS, Saved, Setup, now_ms, save};

/// A call that failed: whether trying it again may help (no answer, a server error), or the
/// server refused it (4xx: sent again, it would be refused again).
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) text: String,
    pub(super) retry: bool,
}

impl From<Failure> for String {
    fn from(f: Failure) -> String {
        f.text
    }
}

pub(super) type Call<T> = std::result::Result<T, Failure>;

/// MLflow's REST API (`/api/2.0/mlflow/...`), the calls rtune makes.
pub(super) struct Client {
    http: reqwest::Client,
    uri: String,
}

impl Client {
    pub(super) fn new(uri: &str) -> Client {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_default();
        Client { http, uri: uri.to_owned() }
    }

    /// One call; an error names the call and what the server said.
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Json>) -> Call<Json> {
        let url = format!("{}/api/2.0/mlflow/{path}", self.uri);
        let mut request = self.http.request(method, &url);
        if let Some(body) = body {
            request = request.header("Content-Type", "application/json").body(body.to_string());
        }
        let failed = |text: String, retry: bool| Failure { text: format!("{path}: {text}"), retry };
        let response = request.send().await.map_err(|e| failed(e.to_string(), true))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| failed(e.to_string(), true))?;
        if !status.is_success() {
            let said: String = text.chars().take(300).collect();
            return Err(failed(format!("{status}: {said}"), !status.is_client_error()));
        }
        serde_json::from_str(&text).map_err(|e| failed(e.to_string(), true))
    }

    async fn post(&self, path: &str, body: Json) -> Call<Json> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// The sweep's experiment and parent run: found again for a restored sweep (marked running),
    /// else made, with the sweep's settings as params.
    pub(super) async fn begin(&self, setup: &Setup) -> Call<Saved> {
        if let Some(saved) = &setup.saved {
            self.set_running(&saved.parent_run_id).await?;
            return Ok(Saved { log_artifacts: setup.log_artifacts, ..saved.clone() });
        }
        let name = &setup.experiment;
        let path = format!("experiments/get-by-name?experiment_name={}", url_encode(name));
        let experiment_id = match self.call(reqwest::Method::GET, &path, None).await {
            Ok(found) => {
                found["experiment"]["experiment_id"].as_str().unwrap_or_default().to_owned()
            }
            Err(e) if e.text.contains("RESOURCE_DOES_NOT_EXIST") => {
                let made = self.post("experiments/create", json!({"name": name})).await?;
                made["experiment_id"].as_str().unwrap_or_default().to_owned()
            }
            Err(e) => return Err(e),
        };
        let info = &setup.info;
        let tags = [("rtune.experiment", info.path.display().to_string())];
        let tags: Vec<(&str, &str)> = tags.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (parent_run_id, artifact_uri) =
            self.create_run(&experiment_id, &info.name, &tags).await?;
        let params: Vec<(String, String)> = info
            .settings
            .iter()
            .map(|(k, v)| (k.clone(), v.chars().take(MAX_PARAM_CHARS).collect()))
            .collect();
        for chunk in params.chunks(MAX_PARAMS) {
            self.log_batch(&parent_run_id, &[], chunk, &[]).await?;
        }
        let saved = Saved {
            tracking_uri: setup.uri.clone(),
            experiment_id,
            parent_run_id,
            artifact_uri,
            trials: BTreeMap::new(),
            log_artifacts: setup.log_artifacts,
            unsent: 0,
        };
        save(&setup.state_path, &saved);
        Ok(saved)
    }

    pub(super) async fn create_run(
        &self,
        experiment_id: &str,
        name: &str,
        tags: &[(&str, &str)],
    ) -> Call<(String, String)> {
        let tags: Vec<Json> = tags.iter().map(|(k, v)| json!({"key": k, "value": v})).collect();
        let body = json!({"experiment_id": experiment_id, "run_name": name, "start_time": now_ms(), "tags": tags});
        let made = self.post("runs/create", body).await?;
        let info = &made["run"]["info"];
        let artifacts = info["artifact_uri"].as_str().unwrap_or_default().to_owned();
        let no_id = || Failure { text: format!("runs/create: no run id in {made}"), retry: true };
        let run_id = info["run_id"].as_str().map(str::to_owned).ok_or_else(no_id)?;
        Ok((run_id, artifacts))
    }

    /// The run of `trial` under `parent`, if one was made.
    pub(super) async fn find_run(
        &self,
        experiment_id: &str,
        parent: &str,
        trial: &str,
    ) -> Call<Option<String>> {
        let quote = |v: &str| v.replace('\'', "\\'");
        let filter = format!(
            "tags.`mlflow.parentRunId` = '{}' and tags.`rtune.trial_id` = '{}'",
            quote(parent),
            quote(trial)
        );
        let body = json!({"experiment_ids": [experiment_id], "filter": filter, "max_results": 1});
        let found = self.post("runs/search", body).await?;
        Ok(found["runs"][0]["info"]["run_id"].as_str().map(str::to_owned))
    }

    /// Puts `bytes` at `path` among a run's artifacts, through the server's artifact proxy
    /// (`mlflow-artifacts:/` URIs, what `mlflow server` gives by default). None for an
    /// artifact store the server does not proxy.
    pub(super) async fn put_artifact(
        &self,
        artifact_uri: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> Option<Call<()>> {
        let root = artifact_uri.strip_prefix("mlflow-artifacts:")?.trim_start_matches('/');
        let url = format!("{}/api/2.0/mlflow-artifacts/artifacts/{root}/{path}", self.uri);
        let failed = |text: String, retry: bool| Failure { text: format!("{path}: {text}"), retry };
        let sent =
            self.http.put(&url).header("Content-Type", "application/octet-stream").body(bytes);
        let outcome = match sent.send().await {
            Err(e) => Err(failed(e.to_string(), true)),
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(failed(r.status().to_string(), !r.status().is_client_error())),
        };
        Some(outcome)
    }

    pub(super) async fn log_batch(
        &self,
        run_id: &str,
        metrics: &[Json],
        params: &[(String, String)],
        tags: &[(String, String)],
    ) -> Call<()> {
        let pairs = |kv: &[(String, String)]| -> Vec<Json> {
            kv.iter().map(|(k, v)| json!({"key": k, "value": v})).collect()
        };
        let body = json!({"run_id": run_id, "metrics": metrics, "params": pairs(params), "tags": pairs(tags)});
        self.post("runs/log-batch", body).await.map(drop)
    }

    pub(super) async fn set_running(&self, run_id: &str) -> Call<()> {
        self.post("runs/update", json!({"run_id": run_id, "status": "RUNNING"})).await.map(drop)
    }

    pub(super) async fn end_run(&self, run_id: &str, status: &str) -> Call<()> {
        let body = json!({"run_id": run_id, "status": status, "end_time": now_ms()});
        self.post("runs/update", body).await.map(drop)
    }
}

/// `name` for a URL's query.
pub(super) fn url_encode(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}
