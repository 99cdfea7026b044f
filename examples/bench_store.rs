//! Checkpoint upload and download throughput against an S3-compatible store, as a rank uploads
//! a checkpoint (`Remote::upload_folder`) and a reader fetches one (`Remote::download`):
//!
//!     bench_store upload s3://bucket/prefix DIR     # DIR goes up as prefix/<DIR's name>
//!     bench_store download s3://bucket/prefix DIR   # prefix's objects come down into DIR
//!
//! The endpoint and credentials come from the `AWS_*` environment. Prints one JSON line:
//! `{"op": .., "bytes": .., "seconds": .., "mb_per_s": ..}`. `bench/store.py` runs it beside
//! pyarrow's S3 file system and the AWS CLI.

use std::path::Path;
use std::time::Instant;

use rtune::storage::remote::Remote;

fn size_of(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => size_of(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [op, url, dir] = args.as_slice() else {
        anyhow::bail!("usage: bench_store upload|download s3://bucket/prefix DIR");
    };
    let remote = Remote::parse(url)?;
    let dir = Path::new(dir);
    let began = Instant::now();
    match op.as_str() {
        "upload" => {
            let name =
                dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            remote.upload_folder(dir, &name)?;
        }
        "download" => {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(remote.download(dir))?;
        }
        other => anyhow::bail!("{other}: use upload or download"),
    }
    let seconds = began.elapsed().as_secs_f64();
    let bytes = size_of(dir);
    let mb_per_s = bytes as f64 / 1e6 / seconds;
    println!(
        r#"{{"op": "{op}", "bytes": {bytes}, "seconds": {seconds:.3}, "mb_per_s": {mb_per_s:.1}}}"#
    );
    Ok(())
}
