//! A relay in front of the test S3 server that reads each HTTP/1.1 request whole and, by its
//! request line, passes it on, passes it on late, refuses it, or holds it (read, answered to
//! nobody) until released, then delivers it on a connection of its own: a request held in the
//! network while its sender dies, landing afterwards.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;

use crate::storage::S3Server;

/// What the relay does with a request.
pub(crate) enum Action {
    Pass,
    /// Passed on after this long (a slow link).
    Delay(Duration),
    /// Held until [`Relay::release`].
    Hold,
    /// Answered `403 Forbidden` by the relay, never passed on.
    Refuse,
}

pub(crate) struct Relay {
    pub(crate) endpoint: String,
    released: Arc<AtomicBool>,
    /// The server's answer to a held request once delivered (its status line).
    answer: Arc<Mutex<Option<String>>>,
}

/// What decides each request's fate, by its request line (`PUT /bucket/key HTTP/1.1`).
type Policy = dyn Fn(&str) -> Action + Send + Sync;

impl Relay {
    pub(crate) fn start(
        server: &S3Server,
        policy: impl Fn(&str) -> Action + Send + Sync + 'static,
    ) -> Result<Relay> {
        let upstream = server.endpoint.trim_start_matches("http://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let released = Arc::new(AtomicBool::new(false));
        let answer = Arc::new(Mutex::new(None));
        let policy: Arc<Policy> = Arc::new(policy);
        let (r, a) = (released.clone(), answer.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(&upstream) else { continue };
                let (r, a, policy) = (r.clone(), a.clone(), policy.clone());
                std::thread::spawn(move || relay(client, server, &*policy, &r, &a));
            }
        });
        Ok(Relay { endpoint, released, answer })
    }

    /// Delivers what is held.
    pub(crate) fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
    }

    /// The status line the server answered a held request with, once delivered.
    pub(crate) fn answer(&self) -> Option<String> {
        self.answer.lock().unwrap().clone()
    }
}

/// Passes `client`'s requests to `server` one at a time as `policy` says, and the answers
/// back.
fn relay(
    client: TcpStream,
    mut server: TcpStream,
    policy: &Policy,
    released: &AtomicBool,
    answer: &Mutex<Option<String>>,
) {
    let Ok(reader) = client.try_clone() else { return };
    let Ok(mut back) = server.try_clone() else { return };
    let Ok(mut refusals) = client.try_clone() else { return };
    let mut requests = BufReader::new(reader);
    let mut to_client = client;
    std::thread::spawn(move || std::io::copy(&mut back, &mut to_client));
    while let Some(request) = read_request(&mut requests) {
        let head = String::from_utf8_lossy(&request[..request.len().min(1000)]).into_owned();
        match policy(head.lines().next().unwrap_or_default()) {
            Action::Pass => {}
            Action::Delay(by) => std::thread::sleep(by),
            Action::Hold => {
                while !released.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let Ok(mut late) = TcpStream::connect(server.peer_addr().unwrap()) else { return };
                let _ = late.write_all(&request);
                let mut status = String::new();
                let _ = BufReader::new(late).read_line(&mut status);
                *answer.lock().unwrap() = Some(status.trim().to_owned());
                return;
            }
            Action::Refuse => {
                // One request at a time on a connection: no answer of the server's is under
                // way to interleave with this one.
                let refusal = "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n";
                if refusals.write_all(refusal.as_bytes()).is_err() {
                    return;
                }
                continue;
            }
        }
        if server.write_all(&request).is_err() {
            return;
        }
    }
}

/// One HTTP/1.1 request, whole (its head and its `Content-Length` of body); None at the end.
fn read_request(from: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut request = Vec::new();
    let mut length = 0;
    loop {
        let mut line = Vec::new();
        if from.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
        let text = String::from_utf8_lossy(&line).to_ascii_lowercase();
        if let Some(value) = text.strip_prefix("content-length:") {
            length = value.trim().parse().ok()?;
        }
        request.extend_from_slice(&line);
        if line == b"\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    from.read_exact(&mut body).ok()?;
    request.extend_from_slice(&body);
    Some(request)
}
