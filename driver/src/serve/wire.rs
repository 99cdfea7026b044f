//! The link between a server and its replica processes: each replica process dials the
//! server's dock (a loopback listener), says the server's token and its pid, then answers batches,
//! one at a time: a batch's rows go down as a frame, its predictions (or the model's error)
//! come back. A frame is a 4-byte little-endian length, then the columns: each a name, a kind
//! (f32, i64 or string) and its values. A replica whose link breaks has died; its process is
//! started again by the pool's failure handling and dials in again.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
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

/// Where replica processes dial in.
pub struct Dock {
    /// None once closed.
    listener: Mutex<Option<TcpListener>>,
    address: SocketAddr,
    token: String,
    /// Why the replicas cannot start, once their launcher knows (their run failed).
    failed: Mutex<Option<String>>,
    /// The links made, to end them all on close.
    links: Mutex<Vec<TcpStream>>,
}

impl Dock {
    /// A dock on a free loopback port, with a fresh token.
    pub fn open() -> Result<Dock> {
        let io = |e| Error::io("the replicas' dock", e);
        let listener = TcpListener::bind("127.0.0.1:0").map_err(io)?;
        listener.set_nonblocking(true).map_err(io)?;
        let address = listener.local_addr().map_err(io)?;
        let token = format!("{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>());
        Ok(Dock {
            listener: Mutex::new(Some(listener)),
            address,
            token,
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

    /// The next replica that dials in with the token, within `patience`.
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
                Ok((mut stream, _)) => {
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_nodelay(true);
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                    // The token, then the replica's pid.
                    let hello = read_frame(&mut stream).ok().flatten().unwrap_or_default();
                    let hello = String::from_utf8_lossy(&hello).into_owned();
                    let Some(pid) = hello.strip_prefix(&format!("{}\n", self.token)) else {
                        tracing::warn!("a connection to the replicas' dock without its token");
                        continue;
                    };
                    let pid = pid.to_owned();
                    let _ = stream.set_read_timeout(None);
                    if let Ok(link) = stream.try_clone() {
                        self.links.lock().unwrap_or_else(|e| e.into_inner()).push(link);
                    }
                    return Ok(Box::new(Replica { stream, pid }));
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
}

/// A replica process, as the batching thread sees it.
struct Replica {
    stream: TcpStream,
    pid: String,
}

impl Engine for Replica {
    fn predict(&mut self, frame: DataFrame) -> Result<DataFrame> {
        write_frame(&mut self.stream, &encode(&frame)?).map_err(broken)?;
        let answer = read_frame(&mut self.stream).map_err(broken)?;
        decode_answer(&answer.ok_or_else(|| broken("the replica closed it"))?)
    }

    fn place(&self) -> String {
        format!("pid {}", self.pid)
    }
}

/// A replica process's side: dials `dock` with `token`, then answers each batch with
/// `predict` until the server closes the link. A link that cannot be made or breaks means the
/// server is gone or stopping: the replica's work is done, and it returns Ok.
pub fn answer_batches(
    dock: &str,
    token: &str,
    mut predict: impl FnMut(DataFrame) -> Result<DataFrame>,
) -> Result<()> {
    let Ok(mut stream) = TcpStream::connect(dock) else { return Ok(()) };
    let _ = stream.set_nodelay(true);
    let hello = format!("{token}\n{}", std::process::id());
    if write_frame(&mut stream, hello.as_bytes()).is_err() {
        return Ok(());
    }
    while let Ok(Some(batch)) = read_frame(&mut stream) {
        let answer = decode(&batch).and_then(&mut predict);
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

    #[test]
    fn a_replica_answers_through_the_dock_and_strangers_are_ignored() {
        let dock = Dock::open().unwrap();
        let address = dock.address().to_string();
        let stranger = address.clone();
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(stranger).unwrap();
            write_frame(&mut s, b"wrong\n1").unwrap();
        });
        let (a, token) = (address.clone(), dock.token().to_owned());
        let replica = std::thread::spawn(move || {
            answer_batches(&a, &token, |frame| {
                let rows = frame.height();
                Ok(DataFrame::new(rows, vec![Column::new("prediction".into(), vec![7i64; rows])])
                    .unwrap())
            })
        });
        let mut engine = dock.accept(Duration::from_secs(10)).unwrap();
        let rows = DataFrame::new(2, vec![Column::new("x".into(), vec![0f32, 1.0])]).unwrap();
        let answer = engine.predict(rows).unwrap();
        assert_eq!(answer.column("prediction").unwrap().i64().unwrap().get(1), Some(7));
        // Closing the dock ends the replica's link, and the replica returns.
        dock.close();
        replica.join().unwrap().unwrap();
        drop(engine);
        let e = dock.accept(Duration::from_secs(10)).err().unwrap().to_string();
        assert!(e.contains("stopping"), "{e}");
        let fresh = Dock::open().unwrap();
        fresh.fail("the pool has no CPU for it".into());
        let e = fresh.accept(Duration::from_secs(10)).err().unwrap().to_string();
        assert!(e.contains("the pool has no CPU"), "{e}");
    }
}
