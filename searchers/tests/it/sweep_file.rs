//! The sweep-file form of search spaces in TOML and JSON, and its typed errors.

use rtune_searchers::{
    BasicVariant, Error, Param, Params, SearchSpace, Searcher, Suggestion, TrialId, Value, choice,
    grid_search, loguniform, qlograndint, quniform,
};

const SWEEP: &str = r#"
epochs = 20
layers = { grid_search = [1, 2, 3] }
tags = ["a", "b"]

[model]
lr = { loguniform = [1e-4, 1e-1] }
hidden = { choice = [64, 128, 256] }
dropout = { quniform = [0.0, 0.5, 0.1] }
batch = { qlograndint = { low = 16, high = 256, q = 16 } }
act = { constant = { choice = "relu" } }
"#;

fn expected() -> SearchSpace {
    let mut act = rtune_searchers::Map::new();
    act.insert("choice", "relu");
    SearchSpace::new()
        .add("epochs", 20)
        .add("layers", grid_search([1, 2, 3]))
        .add("tags", vec!["a", "b"])
        .add(
            "model",
            SearchSpace::new()
                .add("lr", loguniform(1e-4, 1e-1).unwrap())
                .add("hidden", choice([64, 128, 256]))
                .add("dropout", quniform(0.0, 0.5, 0.1).unwrap())
                .add("batch", qlograndint(16, 256, 16).unwrap())
                .add("act", Param::Const(Value::Map(act))),
        )
}

#[test]
fn toml_reads_into_the_space_the_builder_makes() {
    let space: SearchSpace = toml::from_str(SWEEP).unwrap();
    assert_eq!(space, expected());
    // And it samples: 3 grid points, nested params in order.
    let mut s = BasicVariant::new(space).unwrap().seed(1);
    let mut n = 0;
    while let Suggestion::Params(p) = s.suggest(TrialId(n)).unwrap() {
        n += 1;
        assert_eq!(p.get::<i64>("epochs").unwrap(), 20);
        let lr = p.get::<f64>("model.lr").unwrap();
        assert!((1e-4..=1e-1).contains(&lr));
        assert_eq!(p.get::<String>("model.act.choice").unwrap(), "relu");
        let keys: Vec<String> = p.flatten().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys[..4], ["epochs", "layers", "tags", "model.lr"]);
    }
    assert_eq!(n, 3);
}

#[test]
fn json_round_trip_is_exact() {
    let space = expected();
    let json = serde_json::to_string(&space).unwrap();
    let back: SearchSpace = serde_json::from_str(&json).unwrap();
    assert_eq!(back, space);
    // TOML writes plain values before tables, so only the content survives, not the order.
    let toml_text = toml::to_string(&space).unwrap();
    let back: SearchSpace = toml::from_str(&toml_text).unwrap();
    let unordered = |s: &SearchSpace| serde_json::to_value(s).unwrap();
    assert_eq!(unordered(&back), unordered(&space));
}

fn typed_error(text: &str) -> Error {
    let v: Value = toml::from_str(text).unwrap();
    SearchSpace::from_value(&v).unwrap_err()
}

#[test]
fn bad_sweep_files_give_typed_errors_with_key_paths() {
    let e = typed_error("[model]\nlr = { loguniform = [0, 1] }");
    assert!(matches!(&e, Error::InvalidDomain { path, .. } if path == "model.lr"), "{e:?}");
    assert!(e.to_string().contains("parameter `model.lr`"), "{e}");
    assert!(e.to_string().contains("0 < low < high"), "{e}");

    let e = typed_error("n = { randint = [5, 5] }");
    assert!(matches!(&e, Error::InvalidDomain { path, .. } if path == "n"), "{e:?}");

    let e = typed_error("[a.b]\nc = { choice = [] }");
    assert!(matches!(&e, Error::InvalidDomain { path, .. } if path == "a.b.c"), "{e:?}");

    let e = typed_error("q = { quniform = [0.0, 1.0, 0.0] }");
    assert!(e.to_string().contains("q > 0"), "{e}");

    let e = typed_error("u = { uniform = [1.0] }");
    assert!(matches!(&e, Error::InvalidSpace { path, .. } if path == "u"), "{e:?}");
    assert!(e.to_string().contains("uniform = [low, high]"), "{e}");

    let e = typed_error("u = { randint = [1.5, 3] }");
    assert!(e.to_string().contains("must be an integer"), "{e}");

    let e = typed_error("u = { loguniform = { low = 1e-3, hi = 1 } }");
    assert!(e.to_string().contains("unknown argument `hi`"), "{e}");

    let e = typed_error("g = { grid_search = 3 }");
    assert!(e.to_string().contains("grid_search: expected a list"), "{e}");

    // The serde path gives the same message.
    let e = toml::from_str::<SearchSpace>("[model]\nlr = { loguniform = [0, 1] }").unwrap_err();
    assert!(e.to_string().contains("parameter `model.lr`"), "{e}");
}

#[test]
fn params_convert_to_and_from_serde_json() {
    let p = Params::new().with("lr", 0.1).with("n", 3).with("tags", vec!["x"]);
    let json: serde_json::Value = serde_json::to_value(&p).unwrap();
    assert_eq!(json, serde_json::json!({"lr": 0.1, "n": 3, "tags": ["x"]}));
    let back: Params = serde_json::from_value(json).unwrap();
    assert_eq!(back, p);
    let e = back.get::<i64>("lr").unwrap_err();
    assert_eq!(e.to_string(), "parameter `lr`: expected an integer (i64), found float 0.1");
}
