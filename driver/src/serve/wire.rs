//! The link between a server and its replica processes: each replica process dials the
//! server's dock (on loopback, or on a cluster at the address the cluster's nodes reach this
//! machine by), says the server's token, its pid and its host, and is sent the export itself
//! (the files the server read when it started: a replica on another node needs no copy of its
//! own, and every replica serves what the server describes). It loads the export and says
//! whether it could; then it answers batches, one at a time: a batch's rows go down as a frame,
//! its predictions (or the model's error) come back. A frame is a 4-byte little-endian length,
//! then the columns: each a name, a kind (f32, i64 or string) and its values. A replica whose
//! link breaks has died; its process is started again by the pool's failure handling and dials
//! in again.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use polars::prelude::{Column, DataFrame, DataType};

use super::batch::Engine;
use crate::error::{Error, Result};

/// A frame's largest size: what a replica reads before it refuses a link.
const MAX_FRAME: usize = 1 << 31;

fn broken(e: impl std::fmt::Display) -> Error {
    Error::Worker(format!("the link to a serving replica broke: {e}"))
}

/// Writes one frame.
pub fn write_frame(stream: &mut impl Write, payload: &[u8]) -> std::io::Result<()> {
    stream.write_all(&(payload.len() as u32).to_le_bytes())?;
    stream.write_all(payload)?;
    stream.flush()
}

/// Reads one frame; None at the end of the stream.
pub fn read_frame(stream: &mut impl Read) -> std::io::Result<Option<Vec<u8>>> {
    let mut length = [0u8; 4];
    match stream.read_exact(&mut length) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let length = u32::from_le_bytes(length) as usize;
    if length > MAX_FRAME {
        return Err(std::io::Error::other(format!("a frame of {length} bytes")));
    }
    let mut payload = vec![0; length];
    stream.read_exact(&mut payload)?;
    Ok(Some(payload))
}

const F32: u8 = 0;
const I64: u8 = 1;
const TEXT: u8 = 2;

/// `frame`'s columns as a payload: numbers as f32 or i64, anything else as strings.
pub fn encode(frame: &DataFrame) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    out.extend_from_slice(&(frame.width() as u32).to_le_bytes());
    out.extend_from_slice(&(frame.height() as u32).to_le_bytes());
    let failed = |e: polars::error::PolarsError| Error::Data(e.to_string());
    for column in frame.columns() {
        let name = column.name().as_bytes();
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name);
        match column.dtype() {
            DataType::Int64 | DataType::Int32 => {
                out.push(I64);
                let values = column.cast(&DataType::Int64).map_err(failed)?;
                for v in values.i64().map_err(failed)?.iter() {
                    out.extend_from_slice(&v.unwrap_or(i64::MIN).to_le_bytes());
                }
            }
            DataType::String => {
                out.push(TEXT);
                for v in column.str().map_err(failed)?.iter() {
                    match v {
                        Some(text) => {
                            out.extend_from_slice(&(text.len() as u32).to_le_bytes());
                            out.extend_from_slice(text.as_bytes());
                        }
                        None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
                    }
                }
            }
            _ => {
                out.push(F32);
                let values = column.cast(&DataType::Float32).map_err(failed)?;
                for v in values.f32().map_err(failed)?.iter() {
                    out.extend_from_slice(&v.unwrap_or(f32::NAN).to_le_bytes());
                }
            }
        }
    }
    Ok(out)
}

/// A payload's columns as a frame.
pub fn decode(payload: &[u8]) -> Result<DataFrame> {
    let mut at = 0;
    let mut take = |n: usize| -> Result<&[u8]> {
        let part = payload.get(at..at + n).ok_or_else(|| broken("a frame ends early"))?;
        at += n;
        Ok(part)
    };
    let u32_of = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
    let width = u32_of(take(4)?) as usize;
    let height = u32_of(take(4)?) as usize;
    let mut columns = Vec::with_capacity(width);
    for _ in 0..width {
        let length = u32_of(take(4)?) as usize;
        let name = String::from_utf8_lossy(take(length)?).into_owned();
        let kind = take(1)?[0];
        let column = match kind {
            F32 => {
                let raw = take(4 * height)?;
                let values: Vec<f32> = raw
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().expect("4")))
                    .collect();
                Column::new(name.into(), values)
            }
            I64 => {
                let raw = take(8 * height)?;
                let values: Vec<i64> = raw
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().expect("8")))
                    .collect();
                Column::new(name.into(), values)
            }
            TEXT => {
                let mut values = Vec::with_capacity(height);
                for _ in 0..height {
                    let length = u32_of(take(4)?);
                    values.push(if length == u32::MAX {
                        None
                    } else {
                        Some(String::from_utf8_lossy(take(length as usize)?).into_owned())
                    });
                }
                Column::new(name.into(), values)
            }
            other => return Err(broken(format!("a column of kind {other}"))),
        };
        columns.push(column);
    }
    DataFrame::new(height, columns).map_err(|e| broken(e.to_string()))
}

/// A replica's answer: its predictions, or the model's error (a data error is the request's
/// fault, anything else the replica's).
pub fn encode_answer(answer: &Result<DataFrame>) -> Result<Vec<u8>> {
    Ok(match answer {
        Ok(frame) => [vec![0], encode(frame)?].concat(),
        Err(Error::Data(message)) => [vec![1], message.as_bytes().to_vec()].concat(),
        Err(other) => [vec![2], other.to_string().into_bytes()].concat(),
    })
}

fn decode_answer(payload: &[u8]) -> Result<DataFrame> {
    let text = || String::from_utf8_lossy(&payload[1..]).into_owned();
    match payload.first() {
        Some(0) => decode(&payload[1..]),
        Some(1) => Err(Error::Data(text())),
        Some(2) => Err(Error::Worker(text())),
        _ => Err(broken("an answer of no kind")),
    }
}

/// The files of the export in `dir` (its subfolders' too), as one payload: what a replica is
/// sent. Each file is its path under `dir` (`/` between folders), then its bytes.
pub fn pack(dir: &Path) -> Result<Vec<u8>> {
    fn walk(dir: &Path, under: &str, files: &mut Vec<(String, std::path::PathBuf)>) -> Result<()> {
        let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
        let mut entries: Vec<_> =
            entries.collect::<std::io::Result<_>>().map_err(|e| Error::io(dir, e))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = format!("{under}{}", entry.file_name().to_string_lossy());
            let path = entry.path();
            if path.is_dir() {
                walk(&path, &format!("{name}/"), files)?;
            } else {
                files.push((name, path));
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(dir, "", &mut files)?;
    let mut out = (files.len() as u32).to_le_bytes().to_vec();
    for (name, path) in files {
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(&bytes);
    }
    if out.len() > MAX_FRAME {
        return Err(Error::Protocol(format!(
            "{}: the export is {} MB; a replica is sent it whole, at most {} MB (serve it \
             --in-process)",
            dir.display(),
            out.len() >> 20,
            MAX_FRAME >> 20
        )));
    }
    Ok(out)
}

/// Writes the files of a [`pack`]ed export into the folder `into`.
pub fn unpack(payload: &[u8], into: &Path) -> Result<()> {
    let mut at = 0;
    let mut take = |n: usize| -> Result<&[u8]> {
        let part = payload.get(at..at + n).ok_or_else(|| broken("an export ends early"))?;
        at += n;
        Ok(part)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
    for _ in 0..count {
        let length = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        let name = String::from_utf8_lossy(take(length)?).into_owned();
        let relative = Path::new(&name);
        if !relative.components().all(|c| matches!(c, std::path::Component::Normal(_))) {
            return Err(broken(format!("an export's file named `{name}`")));
        }
        let size = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes")) as usize;
        let path = into.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        std::fs::write(&path, take(size)?).map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}

/// Where replica processes dial in.
pub struct Dock {
    /// None once closed.
    listener: Mutex<Option<TcpListener>>,
    address: SocketAddr,
    token: String,
    /// The [`pack`]ed export each replica is sent.
    export: Vec<u8>,
    /// Why the replicas cannot start, once their launcher knows (their run failed).
    failed: Mutex<Option<String>>,
    /// The links made, to end them all on close.
    links: Mutex<Vec<TcpStream>>,
}

impl Dock {
    /// A dock on a free port of `ip` (loopback, or the address the cluster reaches), with a
    /// fresh token, sending the export in `dir` as the server reads it now.
    pub fn open(ip: IpAddr, dir: &Path) -> Result<Dock> {
        let export = pack(dir)?;
        let io = |e| Error::io("the replicas' dock", e);
        let listener = TcpListener::bind((ip, 0)).map_err(io)?;
        listener.set_nonblocking(true).map_err(io)?;
        let address = listener.local_addr().map_err(io)?;
        let token = format!("{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>());
        Ok(Dock {
            listener: Mutex::new(Some(listener)),
            address,
            token,
            export,
            failed: Mutex::new(None),
            links: Mutex::new(Vec::new()),
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// The replicas cannot start: `why` ends every wait for one.
    pub fn fail(&self, why: String) {
        *self.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    /// No more replicas dial in, and those linked see their link end (their processes then
    /// end, as a stopping server's should).
    pub fn close(&self) {
        self.listener.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.fail("the server is stopping".into());
        for link in self.links.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = link.shutdown(std::net::Shutdown::Both);
        }
    }

    /// The next replica that dials in with the token and loads the export, within `patience`.
    /// One that says it cannot load it ends the wait with its reason.
    pub fn accept(&self, patience: Duration) -> Result<Box<dyn Engine>> {
        let until = Instant::now() + patience;
        loop {
            if let Some(why) = self.failed.lock().unwrap_or_else(|e| e.into_inner()).clone() {
                return Err(Error::Worker(format!("a serving replica could not start: {why}")));
            }
            let accepted = match &*self.listener.lock().unwrap_or_else(|e| e.into_inner()) {
                Some(listener) => listener.accept(),
                None => return Err(Error::Worker("the replicas' dock is closed".into())),
            };
            match accepted {
                Ok((stream, _)) => {
                    if let Some(replica) = self.greet(stream, until)? {
                        return Ok(Box::new(replica));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= until {
                        return Err(Error::Worker(format!(
                            "no serving replica dialed in within {patience:?} (is the pool \
                             short of the replicas' resources?)"
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(Error::io("the replicas' dock", e)),
            }
        }
    }

    /// A replica's first words: the token, its pid and host; it is sent the export and says
    /// whether it loaded it. None for a connection without the token, or a replica that died
    /// while loading (its process is started again and dials in anew).
    fn greet(&self, mut stream: TcpStream, until: Instant) -> Result<Option<Replica>> {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_nodelay(true);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let hello = read_frame(&mut stream).ok().flatten().unwrap_or_default();
        let hello = String::from_utf8_lossy(&hello).into_owned();
        let mut lines = hello.lines();
        if lines.next() != Some(self.token.as_str()) {
            tracing::warn!("a connection to the replicas' dock without its token");
            return Ok(None);
        }
        let (pid, host) = (lines.next().unwrap_or("?").to_owned(), lines.next().unwrap_or("?"));
        let replica = Replica { place: format!("pid {pid} on {host}"), stream };
        let mut stream = &replica.stream;
        let loading = until.saturating_duration_since(Instant::now()).max(Duration::from_secs(1));
        let _ = stream.set_read_timeout(Some(loading));
        let word = write_frame(&mut stream, &self.export).and_then(|()| read_frame(&mut stream));
        match word {
            Ok(Some(word)) if word.is_empty() => {}
            Ok(Some(word)) => {
                let why = String::from_utf8_lossy(&word);
                return Err(Error::Worker(format!(
                    "a serving replica ({}) cannot load the model: {why}",
                    replica.place
                )));
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Error::Worker(format!(
                    "a serving replica ({}) did not load the model in time",
                    replica.place
                )));
            }
            Ok(None) | Err(_) => {
                tracing::warn!(
                    "a serving replica ({}) died while it loaded the model",
                    replica.place
                );
                return Ok(None);
            }
        }
        let _ = stream.set_read_timeout(None);
        if let Ok(link) = stream.try_clone() {
            self.links.lock().unwrap_or_else(|e| e.into_inner()).push(link);
        }
        Ok(Some(replica))
    }
}

/// A replica process, as the batching thread sees it.
struct Replica {
    stream: TcpStream,
    /// Its pid and host.
    place: String,
}

impl Engine for Replica {
    fn predict(&mut self, frame: DataFrame) -> Result<DataFrame> {
        write_frame(&mut self.stream, &encode(&frame)?).map_err(broken)?;
        let answer = read_frame(&mut self.stream).map_err(broken)?;
        decode_answer(&answer.ok_or_else(|| broken("the replica closed it"))?)
    }

    fn place(&self) -> String {
        self.place.clone()
    }
}

/// A replica process's side: dials `dock` with `token`, is sent the export, loads it with
/// `load` (from a folder of its own, removed once loaded) and says whether it could, then
/// answers each batch until the server closes the link. A link that cannot be made or breaks
/// means the server is gone or stopping: the replica's work is done, and it returns Ok. A
/// model that does not load is the replica's error (said to the server too).
pub fn answer_batches<E: Engine>(
    dock: &str,
    token: &str,
    load: impl FnOnce(&Path) -> Result<E>,
) -> Result<()> {
    let Ok(mut stream) = TcpStream::connect(dock) else { return Ok(()) };
    let _ = stream.set_nodelay(true);
    let hello = format!("{token}\n{}\n{}", std::process::id(), crate::sys::hostname());
    if write_frame(&mut stream, hello.as_bytes()).is_err() {
        return Ok(());
    }
    let Ok(Some(export)) = read_frame(&mut stream) else { return Ok(()) };
    let loaded = tempfile::Builder::new()
        .prefix("rtune-replica-")
        .tempdir()
        .map_err(|e| Error::io("a replica's copy of the export", e))
        .and_then(|dir| {
            unpack(&export, dir.path())?;
            load(dir.path())
        });
    drop(export);
    let mut model = match loaded {
        Ok(model) => model,
        Err(e) => {
            let why = match &e {
                Error::Data(why) | Error::Worker(why) => why.clone(),
                other => other.to_string(),
            };
            let why = Some(why).filter(|w| !w.is_empty());
            let _ =
                write_frame(&mut stream, why.as_deref().unwrap_or("no reason given").as_bytes());
            return Err(e);
        }
    };
    if write_frame(&mut stream, &[]).is_err() {
        return Ok(());
    }
    while let Ok(Some(batch)) = read_frame(&mut stream) {
        let answer = decode(&batch).and_then(|frame| model.predict(frame));
        if write_frame(&mut stream, &encode_answer(&answer)?).is_err() {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_every_kind_of_column() {
        let frame = DataFrame::new(
            3,
            vec![
                Column::new("x".into(), vec![1.5f32, f32::NAN, -0.0]),
                Column::new("prediction".into(), vec![3i64, 0, -1]),
                Column::new("name".into(), vec![Some("a"), None, Some("")]),
            ],
        )
        .unwrap();
        let back = decode(&encode(&frame).unwrap()).unwrap();
        assert_eq!(back.get_column_names(), frame.get_column_names());
        assert_eq!(back.column("prediction").unwrap(), frame.column("prediction").unwrap());
        assert_eq!(back.column("name").unwrap(), frame.column("name").unwrap());
        let x: Vec<u32> = back
            .column("x")
            .unwrap()
            .f32()
            .unwrap()
            .into_no_null_iter()
            .map(f32::to_bits)
            .collect();
        assert_eq!(x, [1.5f32.to_bits(), f32::NAN.to_bits(), (-0.0f32).to_bits()]);
        let refused = decode_answer(&encode_answer(&Err(Error::Data("bad row".into()))).unwrap());
        assert!(matches!(refused, Err(Error::Data(m)) if m == "bad row"));
        assert!(decode(&[1, 0, 0]).is_err());
    }

    /// An export of two files, one in a subfolder.
    fn export() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("model.pt"), [0u8, 1, 2, 255]).unwrap();
        std::fs::create_dir(dir.path().join("card")).unwrap();
        std::fs::write(dir.path().join("card/README.md"), "# model").unwrap();
        dir
    }

    #[test]
    fn an_export_is_sent_whole_and_only_into_its_folder() {
        let dir = export();
        let packed = pack(dir.path()).unwrap();
        let into = tempfile::tempdir().unwrap();
        unpack(&packed, into.path()).unwrap();
        assert_eq!(std::fs::read(into.path().join("model.pt")).unwrap(), [0u8, 1, 2, 255]);
        assert_eq!(std::fs::read_to_string(into.path().join("card/README.md")).unwrap(), "# model");
        // A name that climbs out of the folder is refused; a payload cut short too.
        let mut escape = 1u32.to_le_bytes().to_vec();
        let name = b"../evil";
        escape.extend_from_slice(&(name.len() as u32).to_le_bytes());
        escape.extend_from_slice(name);
        escape.extend_from_slice(&1u64.to_le_bytes());
        escape.push(0);
        assert!(unpack(&escape, into.path()).is_err());
        assert!(!into.path().parent().unwrap().join("evil").exists());
        assert!(unpack(&packed[..packed.len() - 1], into.path()).is_err());
    }

    /// A replica's model of its own: it reads the export it was sent, and predicts its first
    /// byte for every row.
    struct FirstByte(i64);

    impl Engine for FirstByte {
        fn predict(&mut self, frame: DataFrame) -> Result<DataFrame> {
            let rows = frame.height();
            Ok(DataFrame::new(rows, vec![Column::new("prediction".into(), vec![self.0; rows])])
                .unwrap())
        }
    }

    fn first_byte(dir: &Path) -> Result<FirstByte> {
        let bytes = std::fs::read(dir.join("model.pt")).map_err(|e| Error::io(dir, e))?;
        Ok(FirstByte(bytes[3] as i64))
    }

    #[test]
    fn a_replica_answers_through_the_dock_and_strangers_are_ignored() {
        let dir = export();
        let dock = Dock::open([127, 0, 0, 1].into(), dir.path()).unwrap();
        // What the server sends was read when it opened: the folder may go.
        drop(dir);
        let address = dock.address().to_string();
        let stranger = address.clone();
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(stranger).unwrap();
            write_frame(&mut s, b"wrong\n1").unwrap();
        });
        let (a, token) = (address.clone(), dock.token().to_owned());
        let replica = std::thread::spawn(move || answer_batches(&a, &token, first_byte));
        let mut engine = dock.accept(Duration::from_secs(10)).unwrap();
        assert_eq!(
            engine.place(),
            format!("pid {} on {}", std::process::id(), crate::sys::hostname())
        );
        let rows = DataFrame::new(2, vec![Column::new("x".into(), vec![0f32, 1.0])]).unwrap();
        let answer = engine.predict(rows).unwrap();
        assert_eq!(answer.column("prediction").unwrap().i64().unwrap().get(1), Some(255));
        // Closing the dock ends the replica's link, and the replica returns.
        dock.close();
        replica.join().unwrap().unwrap();
        drop(engine);
        let e = dock.accept(Duration::from_secs(10)).err().unwrap().to_string();
        assert!(e.contains("stopping"), "{e}");
        let fresh = Dock::open([127, 0, 0, 1].into(), export().path()).unwrap();
        fresh.fail("the pool has no CPU for it".into());
        let e = fresh.accept(Duration::from_secs(10)).err().unwrap().to_string();
        assert!(e.contains("the pool has no CPU"), "{e}");
    }

    #[test]
    fn a_replica_that_cannot_load_the_model_says_why() {
        let dock = Dock::open([127, 0, 0, 1].into(), export().path()).unwrap();
        let (a, token) = (dock.address().to_string(), dock.token().to_owned());
        let replica = std::thread::spawn(move || {
            answer_batches(&a, &token, |_: &Path| -> Result<FirstByte> {
                Err(Error::Data("no CUDA device on this node".into()))
            })
        });
        let e = dock.accept(Duration::from_secs(10)).err().unwrap().to_string();
        assert!(e.contains("cannot load the model: no CUDA device on this node"), "{e}");
        let e = replica.join().unwrap().err().unwrap().to_string();
        assert!(e.contains("no CUDA device"), "{e}");
    }
}
