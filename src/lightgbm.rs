//! LightGBM through its C API (`LightGBM/c_api.h`), from the `lightgbm` wheel's
//! `lib_lightgbm.so` opened at run time (`crate::native`): datasets, boosters, and the network
//! its data-parallel training runs over (every rank's `machine:port` list, each rank listening
//! on its own).
//!
//! What the library says goes into rtune's log (`LGBM_RegisterLogCallback`, which LightGBM keeps
//! per thread: each thread that calls it registers). A parameter it does not know is not an
//! error to it, only a warning ("Unknown parameter: x"); [`unknown_params`] reads it back, so a
//! probe can refuse the name.
//!
//! A leaf: it knows nothing of workers, runs or models; errors are the library's own words.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::OnceLock;

use crate::native::{Log, Wheel, c_api};

/// The wheel rtune opens LightGBM from.
pub(crate) const WHEEL: Wheel = Wheel {
    library: "LightGBM",
    package: "lightgbm",
    version: "4.7.0",
    path: "lightgbm/lib/lib_lightgbm.so",
    env: "RTUNE_LIGHTGBM_LIB",
};

/// A LightGBM model's file in a checkpoint or an export (LightGBM's text format).
pub const MODEL_FILE: &str = "model.txt";

/// `C_API_DTYPE_FLOAT32`, `C_API_DTYPE_FLOAT64`.
const FLOAT32: c_int = 0;
const FLOAT64: c_int = 1;
/// `C_API_PREDICT_NORMAL`, `C_API_PREDICT_RAW_SCORE`.
const PREDICT_NORMAL: c_int = 0;
const PREDICT_RAW: c_int = 1;

type Handle = *mut c_void;

c_api! {
    /// The calls rtune makes.
    Api {
        LGBM_GetLastError: fn() -> *const c_char;
        LGBM_RegisterLogCallback: fn(extern "C" fn(*const c_char)) -> c_int;
        LGBM_DumpParamAliases: fn(i64, *mut i64, *mut c_char) -> c_int;
        LGBM_DatasetCreateFromMat:
            fn(*const c_void, c_int, i32, i32, c_int, *const c_char, Handle, *mut Handle) -> c_int;
        LGBM_DatasetSetField: fn(Handle, *const c_char, *const c_void, c_int, c_int) -> c_int;
        LGBM_DatasetFree: fn(Handle) -> c_int;
        LGBM_BoosterCreate: fn(Handle, *const c_char, *mut Handle) -> c_int;
        LGBM_BoosterAddValidData: fn(Handle, Handle) -> c_int;
        LGBM_BoosterMerge: fn(Handle, Handle) -> c_int;
        LGBM_BoosterFree: fn(Handle) -> c_int;
        LGBM_BoosterUpdateOneIter: fn(Handle, *mut c_int) -> c_int;
        LGBM_BoosterUpdateOneIterCustom: fn(Handle, *const f32, *const f32, *mut c_int) -> c_int;
        LGBM_BoosterGetNumPredict: fn(Handle, c_int, *mut i64) -> c_int;
        LGBM_BoosterGetPredict: fn(Handle, c_int, *mut i64, *mut f64) -> c_int;
        LGBM_BoosterGetEvalCounts: fn(Handle, *mut c_int) -> c_int;
        LGBM_BoosterGetEvalNames:
            fn(Handle, c_int, *mut c_int, usize, *mut usize, *const *mut c_char) -> c_int;
        LGBM_BoosterGetEval: fn(Handle, c_int, *mut c_int, *mut f64) -> c_int;
        LGBM_BoosterGetCurrentIteration: fn(Handle, *mut c_int) -> c_int;
        LGBM_BoosterGetNumClasses: fn(Handle, *mut c_int) -> c_int;
        LGBM_BoosterGetNumFeature: fn(Handle, *mut c_int) -> c_int;
        LGBM_BoosterSaveModelToString:
            fn(Handle, c_int, c_int, c_int, i64, *mut i64, *mut c_char) -> c_int;
        LGBM_BoosterLoadModelFromString: fn(*const c_char, *mut c_int, *mut Handle) -> c_int;
        LGBM_BoosterCalcNumPredict: fn(Handle, c_int, c_int, c_int, c_int, *mut i64) -> c_int;
        LGBM_BoosterPredictForMat: fn(
            Handle, *const c_void, c_int, i32, i32, c_int, c_int, c_int, c_int, *const c_char,
            *mut i64, *mut f64,
        ) -> c_int;
        LGBM_NetworkInit: fn(*const c_char, c_int, c_int, c_int) -> c_int;
        LGBM_NetworkFree: fn() -> c_int;
    }
}

/// What went wrong: the library's message, or why it could not be opened.
pub type Result<T> = std::result::Result<T, String>;

/// The library, opened on first use (once per process; later calls give the first answer),
/// with this thread's log going to rtune's.
pub(crate) fn api() -> Result<&'static Api> {
    static API: OnceLock<Result<Api>> = OnceLock::new();
    let api = API.get_or_init(open).as_ref().map_err(Clone::clone)?;
    thread_local!(static REGISTERED: Cell<bool> = const { Cell::new(false) });
    if !REGISTERED.get() {
        // SAFETY: a plain C callback that copies the message.
        unsafe { (api.LGBM_RegisterLogCallback)(on_log) };
        REGISTERED.set(true);
    }
    Ok(api)
}

fn open() -> Result<Api> {
    let library = WHEEL.open()?;
    // The C API has no version call; the wheel says it beside the library (lib/..), and a
    // library given by path alone is taken as it is.
    if let Some(version) = WHEEL
        .locate()
        .ok()
        .and_then(|path| Some(path.parent()?.parent()?.join("VERSION.txt")))
        .and_then(|file| std::fs::read_to_string(file).ok())
    {
        let version = version.trim();
        if version != WHEEL.version {
            return Err(format!(
                "{} {version} is installed where rtune is built for {}: install `{}=={}` \
                 (`make trees`)",
                WHEEL.library, WHEEL.version, WHEEL.package, WHEEL.version
            ));
        }
    }
    Api::read(library).map_err(|e| format!("{}: {e}", WHEEL.library))
}

/// What the library says (its warnings include params it does not know).
pub(crate) static LOG: Log = Log::new("LightGBM");

thread_local! {
    /// The line being said: the library calls back with its prefix, its message and the
    /// newline apart.
    static PARTIAL: RefCell<String> = const { RefCell::new(String::new()) };
}

extern "C" fn on_log(message: *const c_char) {
    if message.is_null() {
        return;
    }
    // SAFETY: the library passes a NUL-terminated string valid for the call.
    let piece = unsafe { CStr::from_ptr(message) }.to_string_lossy();
    PARTIAL.with_borrow_mut(|line| {
        line.push_str(&piece);
        while let Some(end) = line.find('\n') {
            let done: String = line.drain(..=end).collect();
            LOG.line(done.trim_start_matches("[LightGBM] "));
        }
    });
}

/// The params the library said it does not know since the last call (its warning "Unknown
/// parameter: x").
pub(crate) fn unknown_params() -> Vec<String> {
    LOG.take()
        .iter()
        .filter_map(|line| line.split_once("Unknown parameter: ").map(|(_, n)| n.trim().to_owned()))
        .collect()
}

/// Every param's other names, by its main name (`learning_rate`: `eta`, `shrinkage_rate`..).
pub(crate) fn aliases() -> Result<&'static BTreeMap<String, Vec<String>>> {
    static ALIASES: OnceLock<Result<BTreeMap<String, Vec<String>>>> = OnceLock::new();
    ALIASES
        .get_or_init(|| {
            let api = api()?;
            let text = read_string(api, &Cell::new(0), |len, out_len, out| unsafe {
                // SAFETY: a buffer of `len` bytes.
                (api.LGBM_DumpParamAliases)(len, out_len, out)
            })?;
            serde_json::from_str(&text).map_err(|e| format!("LightGBM's param aliases: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The main name of `key` (itself if it is one, or unknown).
pub(crate) fn main_name(key: &str) -> String {
    let Ok(aliases) = aliases() else { return key.to_owned() };
    aliases
        .iter()
        .find(|(name, others)| *name == key || others.iter().any(|o| o == key))
        .map_or_else(|| key.to_owned(), |(name, _)| name.clone())
}

/// A string the library writes into a buffer it is given, asked again with the length it
/// said when the first was too short; `hint` is the length to start from (so that a model
/// written every round is written once a round), updated.
fn read_string(
    api: &Api,
    hint: &Cell<usize>,
    call: impl Fn(i64, *mut i64, *mut c_char) -> c_int,
) -> Result<String> {
    let mut buffer = vec![0u8; hint.get().max(1 << 16)];
    let mut needed = 0i64;
    check(api, call(buffer.len() as i64, &mut needed, buffer.as_mut_ptr().cast()))?;
    if needed as usize > buffer.len() {
        buffer = vec![0u8; needed as usize];
        check(api, call(buffer.len() as i64, &mut needed, buffer.as_mut_ptr().cast()))?;
    }
    // A model grows round by round: room for half as much again next time.
    hint.set(needed.max(0) as usize * 3 / 2);
    // The length said counts the closing NUL.
    buffer.truncate((needed.max(1) as usize - 1).min(buffer.len()));
    String::from_utf8(buffer).map_err(|_| "LightGBM wrote a string that is not UTF-8".into())
}

/// The answer of a call: Ok, or the library's last error.
fn check(api: &Api, code: c_int) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    // SAFETY: the library's thread-local error string, valid until its next call here.
    let message = unsafe { CStr::from_ptr((api.LGBM_GetLastError)()) };
    Err(said(&message.to_string_lossy()))
}

/// The library's message as a user reads it: without the source file and line a failed check
/// names (`Check failed: (num_leaves) > (1) at /w/src/io/config_auto.cpp, line 352 .`), and a
/// check as what it needs (`needs num_leaves > 1`).
fn said(message: &str) -> String {
    let text = message.trim();
    let text = match text.rfind(" at ") {
        Some(at) if text[at..].contains(", line ") => &text[..at],
        _ => text,
    };
    match text.strip_prefix("Check failed: ") {
        Some(check) => format!("needs {}", check.replace(['(', ')'], "")),
        None => text.to_owned(),
    }
}

/// `call`, which may talk to the other ranks, with the stack signal held off: LightGBM's
/// sockets fail on an interrupted receive ("Socket recv error, Interrupted system call"), which
/// `rtune stack`'s signal would otherwise cause.
fn networked<T>(call: impl FnOnce() -> T) -> T {
    let _held = rtune_driver::sys::stacks::Uninterrupted::new("LightGBM");
    call()
}

fn c_string(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| format!("{s:?} holds a NUL character"))
}

/// Params as the library reads them: `key=value` items, space-separated (a list's values
/// comma-separated).
pub(crate) fn params_text(params: &[(String, String)]) -> String {
    params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

/// A dense dataset with its labels (LightGBM's `Dataset`, binned at creation).
pub(crate) struct Dataset {
    api: &'static Api,
    handle: Handle,
    rows: usize,
}

impl Dataset {
    /// `rows` rows of `cols` features (row-major, NaN as missing) binned by `params`, or by
    /// `reference`'s bins (an eval set's, by its training set's).
    pub(crate) fn dense(
        values: &[f32],
        rows: usize,
        cols: usize,
        labels: &[f32],
        params: &str,
        reference: Option<&Dataset>,
    ) -> Result<Dataset> {
        let api = api()?;
        let params = c_string(params)?;
        let mut handle = std::ptr::null_mut();
        let reference = reference.map_or(std::ptr::null_mut(), |r| r.handle);
        // SAFETY: `values` holds rows x cols floats, read for the call; a live reference.
        check(
            api,
            networked(|| unsafe {
                (api.LGBM_DatasetCreateFromMat)(
                    values.as_ptr().cast(),
                    FLOAT32,
                    rows as i32,
                    cols as i32,
                    1,
                    params.as_ptr(),
                    reference,
                    &mut handle,
                )
            }),
        )?;
        let dataset = Dataset { api, handle, rows };
        dataset.set_field("label", labels.as_ptr().cast(), labels.len(), FLOAT32)?;
        Ok(dataset)
    }

    /// The scores boosting starts from (class-major: every row's score of class 0, then 1..).
    pub(crate) fn set_init_score(&self, scores: &[f64]) -> Result<()> {
        self.set_field("init_score", scores.as_ptr().cast(), scores.len(), FLOAT64)
    }

    fn set_field(&self, field: &str, data: *const c_void, len: usize, kind: c_int) -> Result<()> {
        let field = c_string(field)?;
        // SAFETY: a live dataset; `len` values of `kind` at `data`, copied by the library.
        check(self.api, unsafe {
            (self.api.LGBM_DatasetSetField)(self.handle, field.as_ptr(), data, len as c_int, kind)
        })
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }
}

impl Drop for Dataset {
    fn drop(&mut self) {
        // SAFETY: made by LGBM_DatasetCreateFromMat, freed once.
        unsafe { (self.api.LGBM_DatasetFree)(self.handle) };
    }
}

/// A booster: the model and how it trains.
pub(crate) struct Booster {
    api: &'static Api,
    handle: Handle,
    /// The length its model text had last time.
    text_len: Cell<usize>,
}

impl Booster {
    /// A booster training on `train` with `params` (the ones `train` was made with).
    pub(crate) fn new(train: &Dataset, params: &str) -> Result<Booster> {
        let api = api()?;
        let params = c_string(params)?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: a live dataset (callers keep it for the booster's life) and a C string.
        check(
            api,
            networked(|| unsafe {
                (api.LGBM_BoosterCreate)(train.handle, params.as_ptr(), &mut handle)
            }),
        )?;
        Ok(Booster { api, handle, text_len: Cell::new(0) })
    }

    /// The model saved in `text` (LightGBM's text format).
    pub(crate) fn load(text: &str) -> Result<Booster> {
        let api = api()?;
        let text = c_string(text)?;
        let (mut iterations, mut handle) = (0, std::ptr::null_mut());
        // SAFETY: a C string and out-pointers.
        check(api, unsafe {
            (api.LGBM_BoosterLoadModelFromString)(text.as_ptr(), &mut iterations, &mut handle)
        })?;
        Ok(Booster { api, handle, text_len: Cell::new(0) })
    }

    /// Evaluates `valid` every round too (after the training set: its index is the count of
    /// sets added before it, plus one).
    pub(crate) fn add_valid(&mut self, valid: &Dataset) -> Result<()> {
        // SAFETY: live handles; callers keep the dataset for the booster's life.
        check(
            self.api,
            networked(|| unsafe { (self.api.LGBM_BoosterAddValidData)(self.handle, valid.handle) }),
        )
    }

    /// Puts `earlier`'s trees before this booster's (a model trained on from `earlier`'s
    /// scores, as LightGBM's `init_model` does).
    pub(crate) fn merge(&mut self, earlier: &Booster) -> Result<()> {
        // SAFETY: live boosters.
        check(self.api, unsafe { (self.api.LGBM_BoosterMerge)(self.handle, earlier.handle) })
    }

    /// Boosts a round; true when no tree could split (the round added nothing).
    pub(crate) fn update(&mut self) -> Result<bool> {
        let mut finished = 0;
        // SAFETY: a live booster and an out-pointer.
        check(
            self.api,
            networked(|| unsafe {
                (self.api.LGBM_BoosterUpdateOneIter)(self.handle, &mut finished)
            }),
        )?;
        Ok(finished != 0)
    }

    /// Boosts a round with the gradients and hessians a custom objective gave (one per row and
    /// class, class-major, for the training set's rows); true as `update`'s.
    pub(crate) fn boost(&mut self, grad: &[f32], hess: &[f32]) -> Result<bool> {
        let expected = self.scores_len(0)?;
        if grad.len() != expected || hess.len() != expected {
            return Err(format!(
                "{} gradients and {} hessians where the training set's rows and classes make \
                 {expected}: give one of each per row and class",
                grad.len(),
                hess.len()
            ));
        }
        let mut finished = 0;
        // SAFETY: a live booster; `expected` floats at each pointer, read for the call.
        check(
            self.api,
            networked(|| unsafe {
                (self.api.LGBM_BoosterUpdateOneIterCustom)(
                    self.handle,
                    grad.as_ptr(),
                    hess.as_ptr(),
                    &mut finished,
                )
            }),
        )?;
        Ok(finished != 0)
    }

    /// The model's scores of the `index`th dataset (0: the training set, then the eval sets in
    /// the order added), class-major, as LightGBM's custom objectives get them: raw with
    /// `objective = "none"`, else through the objective (probabilities for a classifier).
    pub(crate) fn scores(&self, index: usize) -> Result<Vec<f64>> {
        let mut scores = vec![0f64; self.scores_len(index)?];
        let mut len = 0i64;
        // SAFETY: a live booster; room for the scores the library said it has.
        check(self.api, unsafe {
            (self.api.LGBM_BoosterGetPredict)(
                self.handle,
                index as c_int,
                &mut len,
                scores.as_mut_ptr(),
            )
        })?;
        scores.truncate(len as usize);
        Ok(scores)
    }

    fn scores_len(&self, index: usize) -> Result<usize> {
        let mut len = 0i64;
        // SAFETY: a live booster and an out-pointer.
        check(self.api, unsafe {
            (self.api.LGBM_BoosterGetNumPredict)(self.handle, index as c_int, &mut len)
        })?;
        Ok(len as usize)
    }

    /// The metrics every round evaluates, by the library's names (`multi_logloss`).
    pub(crate) fn eval_names(&self) -> Result<Vec<String>> {
        let mut count = 0;
        // SAFETY: a live booster and an out-pointer.
        check(self.api, unsafe { (self.api.LGBM_BoosterGetEvalCounts)(self.handle, &mut count) })?;
        let mut size = 256usize;
        loop {
            let mut buffers = vec![vec![0u8; size]; count.max(0) as usize];
            let pointers: Vec<*mut c_char> =
                buffers.iter_mut().map(|b| b.as_mut_ptr().cast()).collect();
            let (mut written, mut needed) = (0, 0usize);
            // SAFETY: `count` buffers of `size` bytes each.
            check(self.api, unsafe {
                (self.api.LGBM_BoosterGetEvalNames)(
                    self.handle,
                    count,
                    &mut written,
                    size,
                    &mut needed,
                    pointers.as_ptr(),
                )
            })?;
            if needed <= size {
                return Ok(buffers
                    .iter()
                    .map(|b| {
                        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                        String::from_utf8_lossy(&b[..end]).into_owned()
                    })
                    .collect());
            }
            size = needed;
        }
    }

    /// The metrics of set `index` (0: the training set; then the eval sets in the order added)
    /// after the latest round, in the order of [`Booster::eval_names`].
    pub(crate) fn eval(&self, index: usize, count: usize) -> Result<Vec<f64>> {
        let mut values = vec![0f64; count];
        let mut written = 0;
        // SAFETY: room for `count` doubles, the booster's number of metrics.
        check(self.api, unsafe {
            (self.api.LGBM_BoosterGetEval)(
                self.handle,
                index as c_int,
                &mut written,
                values.as_mut_ptr(),
            )
        })?;
        values.truncate(written.max(0) as usize);
        Ok(values)
    }

    /// Rounds boosted so far (a merged model's included).
    pub(crate) fn rounds(&self) -> Result<u32> {
        let mut rounds = 0;
        // SAFETY: a live booster and an out-pointer.
        check(self.api, unsafe {
            (self.api.LGBM_BoosterGetCurrentIteration)(self.handle, &mut rounds)
        })?;
        Ok(rounds.max(0) as u32)
    }

    /// Outputs per row: the classes of a multiclass model, else 1.
    pub(crate) fn num_classes(&self) -> Result<usize> {
        let mut n = 0;
        // SAFETY: a live booster and an out-pointer.
        check(self.api, unsafe { (self.api.LGBM_BoosterGetNumClasses)(self.handle, &mut n) })?;
        Ok(n.max(1) as usize)
    }

    /// The number of features the model was trained on.
    pub(crate) fn num_features(&self) -> Result<usize> {
        let mut n = 0;
        // SAFETY: a live booster and an out-pointer.
        check(self.api, unsafe { (self.api.LGBM_BoosterGetNumFeature)(self.handle, &mut n) })?;
        Ok(n.max(0) as usize)
    }

    /// The model in LightGBM's text format (what `lightgbm.Booster(model_file=..)` loads).
    pub(crate) fn save_text(&self) -> Result<String> {
        read_string(self.api, &self.text_len, |len, out_len, out| unsafe {
            // SAFETY: a live booster and a buffer of `len` bytes; every round, split counts.
            (self.api.LGBM_BoosterSaveModelToString)(self.handle, 0, -1, 0, len, out_len, out)
        })
    }

    /// The model's outputs for `rows` rows of `cols` features (row-major): probabilities for a
    /// classifier (a row's classes together), or the raw scores boosting would go on from;
    /// `params` as for training (`num_threads=2`).
    pub(crate) fn predict(
        &self,
        values: &[f32],
        rows: usize,
        cols: usize,
        raw: bool,
        params: &str,
    ) -> Result<Vec<f64>> {
        let kind = if raw { PREDICT_RAW } else { PREDICT_NORMAL };
        let mut len = 0i64;
        // SAFETY: a live booster and an out-pointer.
        check(self.api, unsafe {
            (self.api.LGBM_BoosterCalcNumPredict)(self.handle, rows as c_int, kind, 0, -1, &mut len)
        })?;
        let mut out = vec![0f64; len.max(0) as usize];
        let params = c_string(params)?;
        // SAFETY: rows x cols floats read for the call, and room for `len` doubles.
        check(self.api, unsafe {
            (self.api.LGBM_BoosterPredictForMat)(
                self.handle,
                values.as_ptr().cast(),
                FLOAT32,
                rows as i32,
                cols as i32,
                1,
                kind,
                0,
                -1,
                params.as_ptr(),
                &mut len,
                out.as_mut_ptr(),
            )
        })?;
        out.truncate(len.max(0) as usize);
        Ok(out)
    }
}

impl Drop for Booster {
    fn drop(&mut self) {
        // SAFETY: made by LGBM_BoosterCreate or a load, freed once.
        unsafe { (self.api.LGBM_BoosterFree)(self.handle) };
    }
}

/// This process's place in LightGBM's network (one per process): left when dropped.
pub(crate) struct Network {
    api: &'static Api,
}

impl Network {
    /// Joins the ranks at `machines` (`host:port`, in rank order), this one listening on
    /// `port` (which tells it its place), waiting up to `timeout_min` minutes for the others.
    pub(crate) fn join(machines: &[String], port: u16, timeout_min: u64) -> Result<Network> {
        let api = api()?;
        let list = c_string(&machines.join(","))?;
        // SAFETY: a C string.
        check(
            api,
            networked(|| unsafe {
                (api.LGBM_NetworkInit)(
                    list.as_ptr(),
                    c_int::from(port),
                    timeout_min.max(1) as c_int,
                    machines.len() as c_int,
                )
            }),
        )?;
        Ok(Network { api })
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // SAFETY: joined in `join`, left once.
        unsafe { (self.api.LGBM_NetworkFree)() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unknown_parameter_warning_names_it() {
        let _quiet = LOG.quiet();
        LOG.take();
        LOG.line("[Warning] Unknown parameter: num_leafs");
        LOG.line("[Info] Total Bins 12");
        assert_eq!(unknown_params(), ["num_leafs"]);
        assert!(unknown_params().is_empty());
    }

    #[test]
    fn a_failed_check_says_what_it_needs() {
        assert_eq!(
            said("Check failed: (num_leaves) > (1) at /w/src/io/config_auto.cpp, line 352 .\n"),
            "needs num_leaves > 1"
        );
        assert_eq!(
            said("Unknown objective type name: multiclas"),
            "Unknown objective type name: multiclas"
        );
    }

    #[test]
    fn params_are_key_value_items() {
        let params = [("objective".into(), "binary".into()), ("metric".into(), "auc,l2".into())];
        assert_eq!(params_text(&params), "objective=binary metric=auc,l2");
    }
}
