//! Staging copies of experiments on a store: what comes down (checkpoints only when read, the
//! GETs counted on the server), and names decided by the store, not by what this machine has
//! staged.

use anyhow::{Context, Result, ensure};
use rtune::ResultGrid;

use crate::common::text;
use crate::storage::{S3Server, kill_sweep_once, rtune, sweep_file, sweep_file_with};

/// The GETs the server answered since `since` requests, of keys ending in `suffix`.
fn gets_since(server: &S3Server, since: usize, suffix: &str) -> Vec<String> {
    let requests = server.requests();
    requests[since.min(requests.len())..]
        .iter()
        .filter(|r| r.starts_with("GET ") && r.split('?').next().unwrap_or("").ends_with(suffix))
        .cloned()
        .collect()
}

/// A killed sweep resumed from the store on a machine that staged nothing fetches the files of
/// the one checkpoint it goes on from, not those of the others (their `metadata.json` only);
/// `rtune export --best` from a third machine fetches the exported checkpoint's files alone,
/// and a checkpoint of the grid it reads comes down whole when something reads it.
pub fn resumes_and_exports_fetch_only_the_checkpoints_they_read() -> Result<()> {
    let server = S3Server::start()?;
    server.boto3("s3.create_bucket(Bucket='exp')")?;
    let dir = tempfile::tempdir()?;
    // Each checkpoint holds a 64 KiB `state.bin` (its bytes the iteration).
    let file = sweep_file_with(dir.path(), "s3://exp/lazy", 0.15, "sync", "checkpoint_kb = 64")?;
    // Killed once the third trial has a checkpoint in the store.
    let stored = |k: &str| k.contains("_00002_") && k.ends_with("state.bin");
    kill_sweep_once(&server, &file, &dir.path().join("first"), "lazy/curves/", stored)?;
    let stored = server.keys("exp", "lazy/curves/")?;
    let in_store = stored.iter().filter(|k| k.ends_with("/state.bin")).count();
    ensure!(in_store >= 5, "{in_store} checkpoints in the store:\n{}", stored.join("\n"));

    // The trials the store's state has not seen end: the third, and the second too where the
    // kill came before the state saying it ended went up.
    let unfinished = server.boto3(
        "import json\nstate = json.loads(s3.get_object(Bucket='exp', \
         Key='lazy/curves/experiment_state.json')['Body'].read())\n\
         print('\\n'.join(t['trial_id'] for t in state['trials'] \
         if t['status'].upper() not in ('TERMINATED', 'ERROR')))",
    )?;
    let unfinished: Vec<&str> = unfinished.lines().filter(|l| !l.is_empty()).collect();
    ensure!(!unfinished.is_empty(), "the store's state says every trial ended");
    let before = server.requests().len();
    let out = rtune(
        &server,
        &dir.path().join("second"),
        &["resume", "s3://exp/lazy/curves", "--no-tui"],
    )?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    // The trials cut off go on from their latest recorded checkpoints: those come down (where
    // they had recorded one), no other.
    let fetched = gets_since(&server, before, "/state.bin");
    let theirs = |k: &String| unfinished.iter().any(|id| k.contains(&format!("_{id}_")));
    ensure!(
        fetched.len() <= unfinished.len() && fetched.iter().all(theirs),
        "the resume fetched {fetched:#?}; the trials cut off: {unfinished:?}"
    );

    let before = server.requests().len();
    let exported = dir.path().join("best");
    let third = dir.path().join("third");
    let args = ["export", "s3://exp/lazy/curves", "--best", "--to", exported.to_str().unwrap()];
    let out = rtune(&server, &third, &args)?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let fetched = gets_since(&server, before, "/state.bin");
    ensure!(fetched.len() == 1, "the export fetched {} checkpoints: {fetched:#?}", fetched.len());
    let metadata = gets_since(&server, before, "/metadata.json");
    ensure!(metadata.len() == 8, "{} metadata files fetched: {metadata:#?}", metadata.len());
    // What was exported is the best checkpoint, whole.
    let grid = ResultGrid::from_path(third.join("exp/lazy/curves"))?;
    let best = grid.best_result()?.result().context("a result")?;
    let checkpoint = best.best_checkpoint().context("a checkpoint")?;
    let name = checkpoint.path().file_name().context("name")?.to_string_lossy().into_owned();
    ensure!(fetched[0].contains(&format!("{name}/state.bin")), "{name}: {fetched:?}");
    let state = std::fs::read(exported.join("state.bin"))?;
    let iteration = checkpoint.iteration()?;
    ensure!(state.len() == 64 << 10 && state.iter().all(|&b| b as u64 == iteration));
    // The others are stubs here until read: exporting another trial fetches its checkpoint.
    let other = grid.trials.iter().find(|t| t.path() != best.path).context("another trial")?;
    let kept = &other.result().context("a result")?.best_checkpoints;
    ensure!(kept.iter().all(|(c, _)| !c.path().join("state.bin").exists()), "came down");
    let before = server.requests().len();
    let to = dir.path().join("other");
    let args = ["export", "s3://exp/lazy/curves", "--trial", other.trial_id(), "--to"];
    let out = rtune(&server, &third, &[&args[..], &[to.to_str().unwrap()]].concat())?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    ensure!(std::fs::read(to.join("state.bin"))?.len() == 64 << 10);
    let fetched = gets_since(&server, before, "/state.bin");
    ensure!(fetched.len() == 1 && fetched[0].contains(other.trial_id()), "{fetched:#?}");
    Ok(())
}

/// A sweep whose name an experiment this machine staged had, on a store that no longer holds
/// it (the bucket emptied), runs under that name, and the old staging copy's files do not go up
/// with it; while the store holds the experiment, the next run of the same file gets a fresh
/// name.
pub fn names_are_decided_by_the_store() -> Result<()> {
    let server = S3Server::start()?;
    server.boto3("s3.create_bucket(Bucket='exp')")?;
    let dir = tempfile::tempdir()?;
    let file = sweep_file(dir.path(), "s3://exp/names", 0.0)?;
    let staging = dir.path().join("staging");
    let run = || rtune(&server, &staging, &["run", file.to_str().unwrap(), "--no-tui"]);
    let out = run()?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let trials = |name: &str| -> Result<usize> {
        let keys = server.keys("exp", &format!("names/{name}/"))?;
        Ok(keys.iter().filter(|k| k.ends_with("/params.json")).count())
    };
    ensure!(trials("curves")? == 4);
    // The store emptied; this machine's staging copy stays.
    server.boto3(
        "for o in s3.list_objects_v2(Bucket='exp', Prefix='names/').get('Contents', []):\n\
         \x20   s3.delete_object(Bucket='exp', Key=o['Key'])",
    )?;
    ensure!(staging.join("exp/names/curves/tuner.json").exists());
    let out = run()?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    let said = text(&out);
    ensure!(!said.contains("curves-2"), "{said}");
    ensure!(trials("curves")? == 4, "{} trials in the store", trials("curves")?);
    // The store holds it now: the next run is curves-2.
    let out = run()?;
    ensure!(out.status.code() == Some(0), "{}", text(&out));
    ensure!(text(&out).contains("this run is curves-2"), "{}", text(&out));
    ensure!(trials("curves-2")? == 4);
    Ok(())
}
