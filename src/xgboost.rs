//! XGBoost through its C API (`xgboost/c_api.h`), from the `xgboost` wheel's `libxgboost.so`
//! opened at run time (`crate::native`): matrices, boosters and the collective its distributed
//! training runs over (the tracker rank 0 starts, which every rank's communicator joins).
//!
//! What the library says goes into rtune's log (`XGBRegisterLogCallback`): its warnings as
//! warnings. A parameter the library does not know is not an error to XGBoost, only a warning
//! ("Parameters: { .. } are not used"); [`Booster::unused_params`] reads it back, so a probe can
//! refuse the name.
//!
//! A leaf: it knows nothing of workers, runs or models; errors are the library's own words.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::OnceLock;

use crate::native::{Log, Wheel, c_api};

/// The wheel rtune opens XGBoost from.
pub(crate) const WHEEL: Wheel = Wheel {
    library: "XGBoost",
    package: "xgboost",
    version: "3.2.0",
    path: "xgboost/lib/libxgboost.so",
    env: "RTUNE_XGBOOST_LIB",
};

/// An XGBoost model's file in a checkpoint or an export: XGBoost's UBJSON (binary JSON) format,
/// its own default since 2.1, which writes a model of large trees about 14 times faster than
/// its JSON and at half the size.
pub const MODEL_FILE: &str = "model.ubj";

/// The file an earlier rtune wrote models to (XGBoost's JSON), still read.
pub const JSON_MODEL_FILE: &str = "model.json";

/// The XGBoost model file in `dir`: `model.ubj`, else an earlier rtune's `model.json` (None:
/// neither is there).
pub fn model_in(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    [MODEL_FILE, JSON_MODEL_FILE].iter().map(|f| dir.join(f)).find(|p| p.is_file())
}

/// The library version rtune's calls are written for (major, minor).
const VERSION: (c_int, c_int) = (3, 2);

type Handle = *mut c_void;

c_api! {
    /// The calls rtune makes.
    Api {
        XGBGetLastError: fn() -> *const c_char;
        XGBoostVersion: fn(*mut c_int, *mut c_int, *mut c_int) -> ();
        XGBRegisterLogCallback: fn(extern "C" fn(*const c_char)) -> c_int;
        XGDMatrixCreateFromMat: fn(*const f32, u64, u64, f32, *mut Handle) -> c_int;
        XGDMatrixSetFloatInfo: fn(Handle, *const c_char, *const f32, u64) -> c_int;
        XGDMatrixFree: fn(Handle) -> c_int;
        XGDMatrixNumRow: fn(Handle, *mut u64) -> c_int;
        XGBoosterCreate: fn(*const Handle, u64, *mut Handle) -> c_int;
        XGBoosterFree: fn(Handle) -> c_int;
        XGBoosterSetParam: fn(Handle, *const c_char, *const c_char) -> c_int;
        XGBoosterUpdateOneIter: fn(Handle, c_int, Handle) -> c_int;
        XGBoosterTrainOneIter: fn(Handle, Handle, c_int, *const c_char, *const c_char) -> c_int;
        XGBoosterEvalOneIter:
            fn(Handle, c_int, *const Handle, *const *const c_char, u64, *mut *const c_char) -> c_int;
        XGBoosterSaveModelToBuffer: fn(Handle, *const c_char, *mut u64, *mut *const c_char) -> c_int;
        XGBoosterLoadModelFromBuffer: fn(Handle, *const c_void, u64) -> c_int;
        XGBoosterBoostedRounds: fn(Handle, *mut c_int) -> c_int;
        XGBoosterSaveJsonConfig: fn(Handle, *mut u64, *mut *const c_char) -> c_int;
        XGBoosterGetNumFeature: fn(Handle, *mut u64) -> c_int;
        XGBoosterPredictFromDMatrix:
            fn(Handle, Handle, *const c_char, *mut *const u64, *mut u64, *mut *const f32) -> c_int;
        XGBoosterDumpModelEx:
            fn(Handle, *const c_char, c_int, *const c_char, *mut u64, *mut *mut *const c_char) -> c_int;
        XGTrackerCreate: fn(*const c_char, *mut Handle) -> c_int;
        XGTrackerWorkerArgs: fn(Handle, *mut *const c_char) -> c_int;
        XGTrackerRun: fn(Handle, *const c_char) -> c_int;
        XGTrackerWaitFor: fn(Handle, *const c_char) -> c_int;
        XGTrackerFree: fn(Handle) -> c_int;
        XGCommunicatorInit: fn(*const c_char) -> c_int;
        XGCommunicatorFinalize: fn() -> c_int;
    }
}

/// What went wrong: the library's message, or why it could not be opened.
pub type Result<T> = std::result::Result<T, String>;

/// The library, opened on first use (once per process; later calls give the first answer).
pub(crate) fn api() -> Result<&'static Api> {
    static API: OnceLock<Result<Api>> = OnceLock::new();
    API.get_or_init(|| {
        let api = Api::read(WHEEL.open()?).map_err(|e| format!("{}: {e}", WHEEL.library))?;
        let (mut major, mut minor, mut patch) = (0, 0, 0);
        // SAFETY: three out-pointers to ints.
        unsafe { (api.XGBoostVersion)(&mut major, &mut minor, &mut patch) };
        if (major, minor) != VERSION {
            return Err(format!(
                "{} {major}.{minor}.{patch} is installed where rtune is built for {}: install \
                 `{}=={}` (`make trees`)",
                WHEEL.library, WHEEL.version, WHEEL.package, WHEEL.version
            ));
        }
        // SAFETY: a plain C callback that copies the message.
        unsafe { (api.XGBRegisterLogCallback)(on_log) };
        Ok(api)
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// What the library says (its warnings include params it does not use).
pub(crate) static LOG: Log = Log::new("XGBoost");

extern "C" fn on_log(message: *const c_char) {
    if !message.is_null() {
        // SAFETY: the library passes a NUL-terminated string valid for the call.
        LOG.line(&unsafe { CStr::from_ptr(message) }.to_string_lossy());
    }
}

/// The answer of a call: Ok, or the library's last error.
fn check(api: &Api, code: c_int) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    // SAFETY: the library's thread-local error string, valid until its next call here.
    let message = unsafe { CStr::from_ptr((api.XGBGetLastError)()) };
    Err(first_lines(&message.to_string_lossy()))
}

/// The library's message as a user reads it: without the stack trace it appends, the time
/// and source file it starts with (`[08:05:52] /__w/xgboost/src/objective/objective.cc:27: `),
/// and with its lists of candidates (`Objective candidate: multi:softmax`, a line each) on one
/// line.
fn first_lines(message: &str) -> String {
    let text = message.split("\nStack trace:").next().unwrap_or(message).trim();
    let mut lines = Vec::new();
    let mut candidates: Vec<(&str, Vec<&str>)> = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match line.split_once(" candidate: ") {
            Some((what, name)) => match candidates.iter_mut().find(|(w, _)| *w == what) {
                Some((_, names)) => names.push(name),
                None => candidates.push((what, vec![name])),
            },
            None => lines.push(strip_source(line).to_owned()),
        }
    }
    for (what, names) in candidates {
        lines.push(format!("{what} candidates: {}", names.join(", ")));
    }
    lines.join("; ")
}

/// `[08:05:52] /path/file.cc:27: message` as `message`.
fn strip_source(line: &str) -> &str {
    let Some(rest) = line.strip_prefix('[').and_then(|l| l.split_once("] ")).map(|(_, r)| r) else {
        return line;
    };
    match rest.split_once(": ") {
        // A source file and line: `/w/src/objective/multiclass_obj.cu:64`.
        Some((source, message)) if !source.contains(' ') && source.contains(':') => message,
        _ => rest,
    }
}

fn c_string(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| format!("{s:?} holds a NUL character"))
}

/// A dense matrix of rows with their labels (XGBoost's `DMatrix`).
pub(crate) struct DMatrix {
    api: &'static Api,
    handle: Handle,
}

impl DMatrix {
    /// `rows` rows of `values.len() / rows` features (row-major), NaN as missing.
    pub(crate) fn dense(values: &[f32], rows: usize, labels: Option<&[f32]>) -> Result<DMatrix> {
        let api = api()?;
        let cols = values.len().checked_div(rows).unwrap_or(0);
        let mut handle = std::ptr::null_mut();
        // SAFETY: `values` holds rows x cols floats; the library copies them.
        check(api, unsafe {
            (api.XGDMatrixCreateFromMat)(
                values.as_ptr(),
                rows as u64,
                cols as u64,
                f32::NAN,
                &mut handle,
            )
        })?;
        let matrix = DMatrix { api, handle };
        if let Some(labels) = labels {
            matrix.set_floats("label", labels)?;
        }
        Ok(matrix)
    }

    /// Its rows.
    pub(crate) fn rows(&self) -> Result<usize> {
        let mut rows = 0u64;
        // SAFETY: a live matrix and an out-pointer.
        check(self.api, unsafe { (self.api.XGDMatrixNumRow)(self.handle, &mut rows) })?;
        Ok(rows as usize)
    }

    fn set_floats(&self, field: &str, values: &[f32]) -> Result<()> {
        let field = c_string(field)?;
        // SAFETY: a live matrix, a C string, and `values.len()` floats the library copies.
        check(self.api, unsafe {
            (self.api.XGDMatrixSetFloatInfo)(
                self.handle,
                field.as_ptr(),
                values.as_ptr(),
                values.len() as u64,
            )
        })
    }
}

impl Drop for DMatrix {
    fn drop(&mut self) {
        // SAFETY: made by XGDMatrixCreateFromMat, freed once.
        unsafe { (self.api.XGDMatrixFree)(self.handle) };
    }
}

/// A booster: the model and how it trains.
pub(crate) struct Booster {
    api: &'static Api,
    handle: Handle,
}

impl Booster {
    /// A booster that caches `matrices` (the training set first, then the eval sets).
    pub(crate) fn new(matrices: &[&DMatrix]) -> Result<Booster> {
        let api = api()?;
        let handles: Vec<Handle> = matrices.iter().map(|m| m.handle).collect();
        let mut handle = std::ptr::null_mut();
        // SAFETY: live matrix handles; the booster keeps references the matrices outlive
        // (callers hold them for its life).
        check(api, unsafe {
            (api.XGBoosterCreate)(handles.as_ptr(), handles.len() as u64, &mut handle)
        })?;
        Ok(Booster { api, handle })
    }

    /// A booster holding the model saved in `bytes` (JSON or UBJSON).
    pub(crate) fn load(bytes: &[u8]) -> Result<Booster> {
        let mut booster = Booster::new(&[])?;
        booster.load_into(bytes)?;
        Ok(booster)
    }

    /// Replaces the model with the one saved in `bytes` (JSON or UBJSON): training goes on
    /// from its rounds.
    pub(crate) fn load_into(&mut self, bytes: &[u8]) -> Result<()> {
        // SAFETY: `bytes` is read for the call.
        check(self.api, unsafe {
            (self.api.XGBoosterLoadModelFromBuffer)(
                self.handle,
                bytes.as_ptr().cast(),
                bytes.len() as u64,
            )
        })
    }

    /// Sets one of the library's parameters (a later call for `eval_metric` adds one).
    pub(crate) fn set_param(&mut self, name: &str, value: &str) -> Result<()> {
        let (name, value) = (c_string(name)?, c_string(value)?);
        // SAFETY: a live booster and two C strings.
        check(self.api, unsafe {
            (self.api.XGBoosterSetParam)(self.handle, name.as_ptr(), value.as_ptr())
        })
    }

    /// Boosts round `round` (0-based) on `train`.
    pub(crate) fn update(&mut self, round: u32, train: &DMatrix) -> Result<()> {
        // SAFETY: a live booster and matrix.
        check(self.api, unsafe {
            (self.api.XGBoosterUpdateOneIter)(self.handle, round as c_int, train.handle)
        })
    }

    /// Boosts round `round` (0-based) on `train` with the gradients and hessians a custom
    /// objective gave (one per row and output, row-major; XGBoost's `Booster.boost`).
    pub(crate) fn boost(
        &mut self,
        round: u32,
        train: &DMatrix,
        (grad, hess): (&[f32], &[f32]),
    ) -> Result<()> {
        let rows = train.rows()?;
        if grad.len() != hess.len() || rows == 0 || !grad.len().is_multiple_of(rows) {
            return Err(format!(
                "{} gradients and {} hessians for {rows} rows: give the same number of each, \
                 one per row and output",
                grad.len(),
                hess.len()
            ));
        }
        let interface = |values: &[f32]| {
            c_string(&format!(
                r#"{{"data": [{}, true], "shape": [{rows}, {}], "typestr": "<f4", "version": 3}}"#,
                values.as_ptr() as usize,
                values.len() / rows
            ))
        };
        let (grad, hess) = (interface(grad)?, interface(hess)?);
        // SAFETY: live handles; the array interfaces point at `grad` and `hess`, alive for
        // the call, of the shape they say.
        check(self.api, unsafe {
            (self.api.XGBoosterTrainOneIter)(
                self.handle,
                train.handle,
                round as c_int,
                grad.as_ptr(),
                hess.as_ptr(),
            )
        })
    }

    /// The parameters the library said it does not use since the last call (its warning
    /// "Parameters: { "a", "b" } are not used").
    pub(crate) fn unused_params() -> Vec<String> {
        let mut unused = Vec::new();
        for line in LOG.take() {
            let Some(at) = line.find("Parameters: {") else { continue };
            let rest = &line[at + "Parameters: {".len()..];
            let names = rest.split('}').next().unwrap_or("");
            unused.extend(names.split(',').map(|n| n.trim().trim_matches('"').to_owned()));
        }
        unused.retain(|n| !n.is_empty());
        unused
    }

    /// The eval metrics after round `round` on each named set, as Ray names them
    /// (`valid-mlogloss`).
    pub(crate) fn eval(&self, round: u32, sets: &[(&str, &DMatrix)]) -> Result<Vec<(String, f64)>> {
        if sets.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<CString> = sets.iter().map(|(n, _)| c_string(n)).collect::<Result<_>>()?;
        let name_ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        let handles: Vec<Handle> = sets.iter().map(|(_, m)| m.handle).collect();
        let mut out = std::ptr::null();
        // SAFETY: live handles and C strings, `sets.len()` of each; the answer is the library's
        // string, valid until its next call on this thread.
        check(self.api, unsafe {
            (self.api.XGBoosterEvalOneIter)(
                self.handle,
                round as c_int,
                handles.as_ptr(),
                name_ptrs.as_ptr(),
                sets.len() as u64,
                &mut out,
            )
        })?;
        // SAFETY: as above.
        let text = unsafe { CStr::from_ptr(out) }.to_string_lossy().into_owned();
        parse_eval(&text)
    }

    /// The model in XGBoost's UBJSON format (what `xgboost.Booster(model_file="model.ubj")`
    /// loads).
    pub(crate) fn save(&self) -> Result<Vec<u8>> {
        let config = c_string(r#"{"format": "ubj"}"#)?;
        let (mut len, mut data) = (0u64, std::ptr::null());
        // SAFETY: a live booster; the answer is the library's buffer, valid until its next call.
        check(self.api, unsafe {
            (self.api.XGBoosterSaveModelToBuffer)(self.handle, config.as_ptr(), &mut len, &mut data)
        })?;
        // SAFETY: `len` bytes at `data`, copied at once.
        Ok(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len as usize) }.to_vec())
    }

    /// The booster's configuration, as XGBoost says it (`learner.objective.name`,
    /// `learner.generic_param.device`...).
    pub(crate) fn config(&self) -> Result<serde_json::Value> {
        let (mut len, mut out) = (0u64, std::ptr::null());
        // SAFETY: a live booster; the answer is the library's string, copied at once.
        check(self.api, unsafe {
            (self.api.XGBoosterSaveJsonConfig)(self.handle, &mut len, &mut out)
        })?;
        // SAFETY: `len` bytes at `out`.
        let text = unsafe { std::slice::from_raw_parts(out.cast::<u8>(), len as usize) };
        serde_json::from_slice(text)
            .map_err(|e| format!("XGBoost's configuration is not JSON: {e}"))
    }

    /// The device the booster trains on, as its configuration says (`cpu`, `cuda:0`).
    pub(crate) fn device(&self) -> Result<String> {
        let config = self.config()?;
        Ok(config["learner"]["generic_param"]["device"].as_str().unwrap_or("cpu").to_owned())
    }

    /// Rounds boosted so far (a loaded model's included).
    pub(crate) fn rounds(&self) -> Result<u32> {
        let mut rounds = 0;
        // SAFETY: a live booster and an out-pointer.
        check(self.api, unsafe { (self.api.XGBoosterBoostedRounds)(self.handle, &mut rounds) })?;
        Ok(rounds.max(0) as u32)
    }

    /// The number of features the model was trained on.
    pub(crate) fn num_features(&self) -> Result<usize> {
        let mut n = 0u64;
        // SAFETY: a live booster and an out-pointer.
        check(self.api, unsafe { (self.api.XGBoosterGetNumFeature)(self.handle, &mut n) })?;
        Ok(n as usize)
    }

    /// The model's output for `matrix`'s rows (probabilities for a classifier: one per class
    /// and row for `multi:softprob`), and its shape.
    pub(crate) fn predict(&self, matrix: &DMatrix) -> Result<(Vec<f32>, Vec<usize>)> {
        self.predict_as(matrix, false)
    }

    /// The model's raw scores (margins) of `matrix`'s rows as training sees them (what a
    /// custom objective takes), and their shape.
    pub(crate) fn margins(&self, matrix: &DMatrix) -> Result<(Vec<f32>, Vec<usize>)> {
        self.predict_as(matrix, true)
    }

    fn predict_as(&self, matrix: &DMatrix, margins: bool) -> Result<(Vec<f32>, Vec<usize>)> {
        let config = c_string(&format!(
            r#"{{"type": {}, "training": {margins}, "iteration_begin": 0, "iteration_end": 0, "strict_shape": false}}"#,
            u8::from(margins)
        ))?;
        let (mut shape, mut dim, mut out) = (std::ptr::null(), 0u64, std::ptr::null());
        // SAFETY: live handles; the answers are the library's buffers, valid until its next
        // call on this thread.
        check(self.api, unsafe {
            (self.api.XGBoosterPredictFromDMatrix)(
                self.handle,
                matrix.handle,
                config.as_ptr(),
                &mut shape,
                &mut dim,
                &mut out,
            )
        })?;
        // SAFETY: `dim` extents at `shape`, and their product of floats at `out`.
        let shape: Vec<usize> = unsafe { std::slice::from_raw_parts(shape, dim as usize) }
            .iter()
            .map(|&n| n as usize)
            .collect();
        let len = shape.iter().product();
        // SAFETY: as above.
        let values = unsafe { std::slice::from_raw_parts(out, len) }.to_vec();
        Ok((values, shape))
    }

    /// Every tree as text (XGBoost's `get_dump()`), for comparing models.
    pub(crate) fn dump(&self) -> Result<Vec<String>> {
        let (fmap, format) = (c_string("")?, c_string("text")?);
        let (mut len, mut out) = (0u64, std::ptr::null_mut());
        // SAFETY: a live booster; the answer is the library's array of strings.
        check(self.api, unsafe {
            (self.api.XGBoosterDumpModelEx)(
                self.handle,
                fmap.as_ptr(),
                0,
                format.as_ptr(),
                &mut len,
                &mut out,
            )
        })?;
        // SAFETY: `len` C strings at `out`.
        let trees = unsafe { std::slice::from_raw_parts(out, len as usize) };
        Ok(trees
            .iter()
            .map(|&t| unsafe { CStr::from_ptr(t) }.to_string_lossy().into_owned())
            .collect())
    }
}

impl Drop for Booster {
    fn drop(&mut self) {
        // SAFETY: made by XGBoosterCreate, freed once.
        unsafe { (self.api.XGBoosterFree)(self.handle) };
    }
}

/// `[3]\ttrain-mlogloss:0.51\tvalid-mlogloss:0.62` as (name, value) pairs.
fn parse_eval(text: &str) -> Result<Vec<(String, f64)>> {
    text.split('\t')
        .skip(1)
        .map(|item| {
            let (name, value) = item
                .rsplit_once(':')
                .ok_or_else(|| format!("XGBoost's evaluation {text:?} is not name:value"))?;
            let value = value
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("XGBoost's evaluation {text:?}: {value:?} is not a number"))?;
            Ok((name.to_owned(), value))
        })
        .collect()
}

/// XGBoost's tracker (rank 0's): the rendezvous of the communicators of `n_workers` ranks.
pub(crate) struct Tracker {
    api: &'static Api,
    handle: Handle,
}

impl Tracker {
    /// Starts a tracker for `n_workers` ranks listening on `host` (a free port), waiting up to
    /// `timeout_s` for them; returns it and the arguments every rank's communicator joins with.
    pub(crate) fn start(n_workers: usize, host: &str, timeout_s: u64) -> Result<(Tracker, String)> {
        let api = api()?;
        let config = serde_json::json!({
            "dmlc_communicator": "rabit",
            "n_workers": n_workers,
            "host": host,
            "port": 0,
            // By task id (`SortBy::kTask`): ranks take the places of their ids.
            "sortby": 1,
            "timeout": timeout_s,
        });
        let config = c_string(&config.to_string())?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: a C string and an out-pointer.
        check(api, unsafe { (api.XGTrackerCreate)(config.as_ptr(), &mut handle) })?;
        let tracker = Tracker { api, handle };
        let empty = c_string("{}")?;
        // SAFETY: a live tracker.
        check(api, unsafe { (api.XGTrackerRun)(handle, empty.as_ptr()) })?;
        let mut args = std::ptr::null();
        // SAFETY: a live tracker; the answer is its string, copied at once.
        check(api, unsafe { (api.XGTrackerWorkerArgs)(handle, &mut args) })?;
        let args = unsafe { CStr::from_ptr(args) }.to_string_lossy().into_owned();
        Ok((tracker, args))
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        let empty = c"{}";
        // SAFETY: a live tracker, waited for (every rank has left) and then freed once.
        unsafe {
            (self.api.XGTrackerWaitFor)(self.handle, empty.as_ptr());
            (self.api.XGTrackerFree)(self.handle);
        }
    }
}

/// This process's place in XGBoost's collective, from the tracker's `worker_args` and its rank:
/// left (`XGCommunicatorFinalize`) when dropped.
pub(crate) struct Communicator {
    api: &'static Api,
}

impl Communicator {
    pub(crate) fn join(worker_args: &str, rank: usize, timeout_s: u64) -> Result<Communicator> {
        let api = api()?;
        let mut config: serde_json::Value = serde_json::from_str(worker_args)
            .map_err(|e| format!("the tracker's worker args {worker_args:?}: {e}"))?;
        // Zero-padded: the tracker orders the ranks by task id as text.
        config["dmlc_task_id"] = serde_json::Value::String(format!("{rank:06}"));
        config["dmlc_timeout"] = serde_json::Value::from(timeout_s);
        config["dmlc_retry"] = serde_json::Value::from(3);
        let config = c_string(&config.to_string())?;
        // SAFETY: a C string.
        check(api, unsafe { (api.XGCommunicatorInit)(config.as_ptr()) })?;
        Ok(Communicator { api })
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // SAFETY: joined in `join`, left once.
        unsafe { (self.api.XGCommunicatorFinalize)() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_evaluation_line_reads_as_rays_names() {
        let pairs = parse_eval("[3]\ttrain-mlogloss:0.51\tvalid-merror:0.062").unwrap();
        assert_eq!(pairs, [("train-mlogloss".into(), 0.51), ("valid-merror".into(), 0.062)]);
        assert!(parse_eval("[0]\ttrain-rmse").is_err());
    }

    #[test]
    fn the_unused_parameters_warning_names_them() {
        let _quiet = LOG.quiet();
        LOG.line(
            "WARNING: src/learner.cc:790: \nParameters: { \"etaa\", \"max_dept\" } are not used.",
        );
        assert_eq!(Booster::unused_params(), ["etaa", "max_dept"]);
        assert!(Booster::unused_params().is_empty());
    }

    #[test]
    fn a_stack_trace_is_left_out_of_messages() {
        assert_eq!(
            first_lines("[10:01:02] /w/src/learner.cc:9: bad value\nStack trace:\n  [bt] (0) x"),
            "bad value"
        );
        assert_eq!(
            first_lines(
                "[10:01:02] /w/objective.cc:27: Unknown objective function: `m`\n\
                         Objective candidate: rank:ndcg\nObjective candidate: multi:softmax\n"
            ),
            "Unknown objective function: `m`; Objective candidates: rank:ndcg, multi:softmax"
        );
    }
}
