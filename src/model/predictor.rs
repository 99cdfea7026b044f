//! Prediction from a trained checkpoint (Ray's `TorchPredictor`): the model rebuilt by the code
//! that built it for training, its weights loaded from the checkpoint or from an export folder
//! (`rtune export`), run without gradients in eval mode. A model trained on datasets carries
//! its `preprocessor.json` (the input columns and the fitted preprocessor): `inputs` applies it
//! to a table, exactly as training did.

use std::path::Path;

use polars::prelude::DataFrame;
use tch::nn::{self, ModuleT};
use tch::{Device, Tensor};

use crate::torch::TorchResult;
use crate::var_store::LoadVarStore;
use rtune_driver::data::{DATA_SCHEMA_FILE, DataSchema};
use rtune_driver::error::{Error, Result};
use rtune_driver::outcome::Checkpoint;

/// A trained model, ready to predict.
pub struct TorchPredictor {
    model: Box<dyn ModuleT>,
    device: Device,
    /// Input columns and the fitted preprocessor, when trained on datasets.
    schema: Option<DataSchema>,
    /// The weights (the model's tensors live in it).
    vs: nn::VarStore,
}

impl std::fmt::Debug for TorchPredictor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TorchPredictor").field("device", &self.device).finish_non_exhaustive()
    }
}

impl TorchPredictor {
    /// `build_model` makes the model on a fresh VarStore (the same code, and the same params,
    /// as in training); the checkpoint's `model.safetensors` then fills its weights. A
    /// checkpoint without weights, or weights of another shape or name, is an error that says
    /// which.
    pub fn from_checkpoint<M: ModuleT + 'static>(
        checkpoint: &Checkpoint,
        build_model: impl FnOnce(&nn::Path) -> M,
    ) -> Result<TorchPredictor> {
        Self::from_checkpoint_boxed(checkpoint, |p| Ok(Box::new(build_model(p))))
    }

    /// The same with a builder that returns the model boxed, or an error (a param it needs is
    /// missing, say): for code that picks the model at run time.
    pub fn from_checkpoint_boxed(
        checkpoint: &Checkpoint,
        build_model: impl FnOnce(&nn::Path) -> Result<Box<dyn ModuleT>>,
    ) -> Result<TorchPredictor> {
        let device = Device::Cpu;
        let schema = DataSchema::read(checkpoint.path())?;
        let mut vs = nn::VarStore::new(device);
        let model = build_model(&vs.root())?;
        checkpoint.load_var_store(&mut vs)?;
        // Weights that need no gradients: cheaper, and TorchScript tracing takes them as
        // constants only so.
        vs.freeze();
        Ok(TorchPredictor { model, device, schema, vs })
    }

    /// The same from a folder `rtune export` wrote (or any committed checkpoint folder).
    pub fn from_export<M: ModuleT + 'static>(
        dir: impl AsRef<Path>,
        build_model: impl FnOnce(&nn::Path) -> M,
    ) -> Result<TorchPredictor> {
        Self::from_checkpoint(&Checkpoint::from_directory(dir.as_ref())?, build_model)
    }

    /// The same predictor on `device` (`Device::Cuda(n)` opens CUDA in this process first:
    /// see [`crate::cuda::use_device`]); a model trained on a GPU predicts on the CPU, and the
    /// other way round. Its inputs are moved there by `predict`.
    pub fn on_device(mut self, device: Device) -> Result<TorchPredictor> {
        let device = crate::cuda::use_device(device)
            .map_err(|e| Error::config("TorchPredictor device", e.to_string()))?;
        self.vs.set_device(device);
        self.device = device;
        Ok(self)
    }

    /// The device it predicts on (the CPU unless [`on_device`](Self::on_device) said otherwise).
    pub fn device(&self) -> Device {
        self.device
    }

    /// The input columns, label and fitted preprocessor it was trained with (None for a model
    /// not trained on datasets).
    pub fn schema(&self) -> Option<&DataSchema> {
        self.schema.as_ref()
    }

    /// The model's input tensor for the rows of `frame`: its feature columns read and
    /// preprocessed as in training (`[rows, inputs]`, float). An error names a missing column,
    /// a category never seen in training, or a checkpoint trained without datasets.
    pub fn inputs(&self, frame: &DataFrame) -> Result<Tensor> {
        let schema = self.schema.as_ref().ok_or_else(|| {
            Error::Data(format!(
                "this model was not trained on datasets (its checkpoint has no {DATA_SCHEMA_FILE}): \
                 build its input tensor yourself and call predict"
            ))
        })?;
        let table = schema.table(frame, false, "the input")?;
        crate::torch::inputs(schema, &table, "the input")
    }

    /// The model's output for a batch of `inputs` (first dimension: the rows), on the
    /// predictor's device.
    pub fn predict(&self, inputs: &Tensor) -> Result<Tensor> {
        let _no_grad = tch::no_grad_guard();
        let inputs = inputs.f_to_device(self.device).torch()?;
        Ok(self.model.forward_t(&inputs, false))
    }

    /// Writes the model as TorchScript (`torch.jit.load(path)` in PyTorch), traced on
    /// `example`, a batch of inputs of the shape it will be called with, on the predictor's
    /// device (trace on the CPU for a file that loads anywhere: `torch.jit.load(path,
    /// map_location=...)` moves it).
    pub fn save_torchscript(&self, path: impl AsRef<Path>, example: &Tensor) -> Result<()> {
        let _no_grad = tch::no_grad_guard();
        let example = example.f_to_device(self.device).torch()?;
        let mut forward = |inputs: &[Tensor]| vec![self.model.forward_t(&inputs[0], false)];
        let traced =
            tch::CModule::create_by_tracing("RtuneModel", "forward", &[example], &mut forward)
                .torch()?;
        traced.save(path.as_ref()).torch()
    }

    /// The predicted class of every row (the argmax of the model's outputs).
    pub fn predict_classes(&self, inputs: &Tensor) -> Result<Tensor> {
        self.predict(inputs)?.f_argmax(-1, false).torch()
    }
}

#[cfg(test)]
mod tests {
    use tch::Kind;
    use tch::nn::Module;

    use super::*;

    /// A checkpoint folder holding `vs`'s weights.
    fn saved(vs: &nn::VarStore) -> (tempfile::TempDir, Checkpoint) {
        let dir = tempfile::tempdir().unwrap();
        vs.save(dir.path().join("model.safetensors")).unwrap();
        let metadata = r#"{"training_iteration": 1, "timestamp": 0.0, "metrics": {},
            "rtune_version": "test"}"#;
        std::fs::write(dir.path().join("metadata.json"), metadata).unwrap();
        let checkpoint = Checkpoint::from_directory(dir.path()).unwrap();
        (dir, checkpoint)
    }

    #[test]
    fn predictions_are_the_trained_models() {
        tch::manual_seed(3);
        let vs = nn::VarStore::new(Device::Cpu);
        let trained = nn::linear(vs.root() / "fc", 3, 2, Default::default());
        let (_dir, checkpoint) = saved(&vs);
        let predictor = TorchPredictor::from_checkpoint(&checkpoint, |p| {
            nn::linear(p / "fc", 3, 2, Default::default())
        })
        .unwrap();
        let x = Tensor::randn([5, 3], (Kind::Float, Device::Cpu));
        let want = trained.forward(&x);
        assert!(predictor.predict(&x).unwrap().allclose(&want, 0.0, 0.0, false));
        assert_eq!(predictor.predict_classes(&x).unwrap(), want.argmax(-1, false));
    }

    #[test]
    fn the_torchscript_module_computes_what_the_predictor_does() {
        tch::manual_seed(5);
        let vs = nn::VarStore::new(Device::Cpu);
        let _ = nn::linear(vs.root() / "fc", 3, 2, Default::default());
        let (dir, checkpoint) = saved(&vs);
        let predictor = TorchPredictor::from_checkpoint(&checkpoint, |p| {
            nn::seq().add(nn::linear(p / "fc", 3, 2, Default::default())).add_fn(|x| x.relu())
        })
        .unwrap();
        let path = dir.path().join("model.pt");
        predictor
            .save_torchscript(&path, &Tensor::zeros([1, 3], (Kind::Float, Device::Cpu)))
            .unwrap();
        let loaded = tch::CModule::load(&path).unwrap();
        let x = Tensor::randn([4, 3], (Kind::Float, Device::Cpu));
        let want = predictor.predict(&x).unwrap();
        assert!(loaded.forward_ts(&[x]).unwrap().allclose(&want, 1e-6, 1e-6, false));
    }

    #[test]
    fn foreign_or_mismatched_weights_are_named() {
        let vs = nn::VarStore::new(Device::Cpu);
        let _ = nn::linear(vs.root() / "fc", 3, 2, Default::default());
        let (dir, checkpoint) = saved(&vs);
        let wider = TorchPredictor::from_checkpoint(&checkpoint, |p| {
            nn::linear(p / "fc", 3, 4, Default::default())
        });
        let e = wider.unwrap_err().to_string();
        assert!(e.contains("cannot load model"), "{e}");
        let renamed = TorchPredictor::from_checkpoint(&checkpoint, |p| {
            nn::linear(p / "other", 3, 2, Default::default())
        });
        assert!(renamed.unwrap_err().to_string().contains("cannot load model"));
        std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
        let e =
            TorchPredictor::from_export(dir.path(), |p| nn::linear(p, 3, 2, Default::default()));
        assert!(e.unwrap_err().to_string().contains("no model.safetensors"));
    }
}
