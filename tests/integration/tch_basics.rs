//! libtorch itself, before anything distributed: a tiny MLP learns, and a VarStore survives a
//! safetensors round trip bit for bit.

use anyhow::Result;
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};

fn mlp(vs: &nn::Path) -> impl Module + use<> {
    nn::seq()
        .add(nn::linear(vs / "l1", 4, 16, Default::default()))
        .add_fn(|x| x.relu())
        .add(nn::linear(vs / "l2", 16, 1, Default::default()))
}

/// y = x·w + noise, a problem an MLP solves in a few dozen steps.
fn regression_data() -> (Tensor, Tensor) {
    tch::manual_seed(7);
    let x = Tensor::randn([256, 4], (Kind::Float, Device::Cpu));
    let w = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.25]).view([4, 1]);
    let y = x.matmul(&w) + 0.01 * Tensor::randn([256, 1], (Kind::Float, Device::Cpu));
    (x, y)
}

pub fn mlp_loss_falls() -> Result<()> {
    let vs = nn::VarStore::new(Device::Cpu);
    let net = mlp(&vs.root());
    let mut opt = nn::Adam::default().build(&vs, 1e-2)?;
    let (x, y) = regression_data();
    let loss_of = |net: &dyn Module| net.forward(&x).mse_loss(&y, tch::Reduction::Mean);
    let first = loss_of(&net).double_value(&[]);
    for _ in 0..60 {
        opt.backward_step(&loss_of(&net));
    }
    let last = loss_of(&net).double_value(&[]);
    anyhow::ensure!(last < first * 0.2, "loss went from {first} to {last}: it should fall by 5x");
    Ok(())
}

pub fn var_store_safetensors_round_trip() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("model.safetensors");
    let vs = nn::VarStore::new(Device::Cpu);
    let net = mlp(&vs.root());
    vs.save(&path)?;

    let mut fresh = nn::VarStore::new(Device::Cpu);
    let fresh_net = mlp(&fresh.root());
    let (x, _) = regression_data();
    anyhow::ensure!(
        !net.forward(&x).equal(&fresh_net.forward(&x)),
        "two fresh initialisations should differ, or the round trip proves nothing"
    );
    fresh.load(&path)?;
    anyhow::ensure!(net.forward(&x).equal(&fresh_net.forward(&x)), "outputs differ after reload");
    Ok(())
}
