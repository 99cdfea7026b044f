//! One optimizer step of the demo's model (`digits-mlp`: 64 -> hidden -> hidden -> 10, six
//! variables), by rtune's `ModelOptimizer` (whose state checkpoints hold) and by libtorch's own
//! Adam behind tch, on one CPU thread; and the forward and backward pass beside them, for scale.
//!
//! A small model's step is mostly calls into libtorch (a handful per kernel): rtune's steps
//! every variable at once, as views of one buffer, where libtorch's steps them one by one.
//!
//! * `adam_rtune/H`, `adam_libtorch/H`: one step, hidden width H;
//! * `forward_backward/H`: a batch of 16 through the model and back.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rtune::worker::OptimizerSettings;
use rtune::worker::OptimizerStep;
use tch::nn::{Module, OptimizerConfig, VarStore};
use tch::{Device, Kind, Tensor};

fn steps(c: &mut Criterion) {
    tch::set_num_threads(1);
    let mut group = c.benchmark_group("optimizer_step");
    for hidden in [32i64, 128, 256] {
        let vs = VarStore::new(Device::Cpu);
        let net = rtune::builtins::digits_mlp(&vs.root(), hidden);
        let x = Tensor::randn([16, 64], (Kind::Float, Device::Cpu));
        let y = Tensor::randint(10, [16], (Kind::Int64, Device::Cpu));
        net.forward(&x).cross_entropy_for_logits(&y).backward();
        let mut ours = OptimizerSettings::adam(1e-3).for_model(&vs).expect("an optimizer");
        let mut theirs = tch::nn::Adam::default().build(&vs, 1e-3).expect("an optimizer");
        group.bench_function(BenchmarkId::new("adam_rtune", hidden), |b| {
            b.iter(|| ours.step().expect("a step"))
        });
        group.bench_function(BenchmarkId::new("adam_libtorch", hidden), |b| {
            b.iter(|| theirs.step())
        });
        group.bench_function(BenchmarkId::new("forward_backward", hidden), |b| {
            b.iter(|| net.forward(&x).cross_entropy_for_logits(&y).backward())
        });
    }
    group.finish();
}

criterion_group!(benches, steps);
criterion_main!(benches);
