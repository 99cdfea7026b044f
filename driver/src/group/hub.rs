//! The driver's gRPC endpoint for worker processes (`rtune.v1.WorkerHub`), served on a TCP
//! port (for workers on other nodes) and on an abstract Unix socket (for workers on this one).
//!
//! The service itself holds no run state: it forwards each call, with a reply slot, to the task
//! that owns the worker group the call names (its `group`), so each group's state has one owner.
//! Calls for a group that is not running are refused.
//!
//! Next to its Unix socket the hub serves a report socket: local workers send their reports there
//! as frames (see `rpc::frame`), answered like the `Reports` stream's but without HTTP/2 on
//! either side. A report then costs each side a write and a read: the CPU of all processes per
//! report fell from about 118 µs to 75 µs (perf, 8 trials x 5,000 reports; BENCHMARKS.md).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use tokio::sync::{mpsc, oneshot};
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::error::{Error, Result};
use crate::proto::report_answer::Answer;
use crate::proto::worker_hub_server::{WorkerHub, WorkerHubServer};
use crate::proto::{
    FinishReply, FinishRequest, JoinReply, JoinRequest, RegroupReply, RegroupRequest, ReportAnswer,
    ReportHello, ReportReply, ReportRequest, WorkerKey,
};
use crate::rpc::{
    HUB_ONLY, UNIX_SCHEME, Unanswered, ask, frame, report_socket_name, token_matches,
};

pub(crate) use crate::rpc::Reply;

/// A worker's call, handed to the owner of its group.
#[derive(Debug)]
pub(crate) enum HubCall {
    Join(JoinRequest, Reply<JoinReply>),
    Report(ReportRequest, Reply<ReportReply>),
    Finish(FinishRequest, Reply<FinishReply>),
    Regroup(RegroupRequest, Reply<RegroupReply>),
    /// Not a worker's: `rtune stack` asks where the group's ranks are.
    Stacks(Reply<crate::proto::TrialStacks>),
}

/// Each running group's trial (empty outside a sweep) and the owner its calls go to.
type Routes = Arc<RwLock<HashMap<String, (String, mpsc::UnboundedSender<HubCall>)>>>;

/// A running hub; stops serving when dropped.
pub(crate) struct Hub {
    address: SocketAddr,
    /// Its Unix socket, for workers on this machine (none where one could not be made).
    socket: Option<UnixSocket>,
    routes: Routes,
    token: Option<String>,
    _shutdown: oneshot::Sender<()>,
}

/// The hub's Unix socket (an abstract one: nothing on disk to clean up), served until dropped,
/// and its report socket where there is one.
struct UnixSocket {
    name: String,
    _shutdown: oneshot::Sender<()>,
    _reports: Option<tokio::sync::watch::Sender<()>>,
}

impl Hub {
    /// Serves on `bind` (port 0 picks a free one). With a `token`, only calls that carry it are
    /// served: a hub reachable beyond loopback must have one. Must be called inside a tokio
    /// runtime.
    pub(crate) async fn start(bind: SocketAddr, token: Option<String>) -> Result<Hub> {
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|e| Error::Worker(format!("worker hub cannot listen on {bind}: {e}")))?;
        let address = listener.local_addr().map_err(|e| Error::io("worker hub socket", e))?;
        let routes = Routes::default();
        let service = || {
            let required = token.clone();
            tonic::service::Routes::new(WorkerHubServer::with_interceptor(
                HubService { routes: routes.clone() },
                move |req: Request<()>| crate::rpc::check_hub_token(req, required.as_deref()),
            ))
        };
        let shutdown = crate::rpc::serve_until_dropped(service(), listener, "worker hub", None);
        // Local workers talk to the hub over a Unix socket: a report then costs no trip through
        // the TCP/IP stack (on loopback that was half the kernel's share of a report). Like the
        // TCP port, it serves only calls that carry the hub's token when it has one.
        let socket = match unix_listener(format!("rtune-hub-{}-{address}", std::process::id())) {
            Ok((name, listener)) => {
                let reports = match unix_listener(report_socket_name(&name)) {
                    Ok((_, reports)) => Some(serve_reports(reports, routes.clone(), token.clone())),
                    Err(e) => {
                        tracing::debug!("worker hub: no report socket ({e}); reports use gRPC");
                        None
                    }
                };
                Some(UnixSocket {
                    name,
                    _shutdown: crate::rpc::serve_unix_until_dropped(
                        service(),
                        listener,
                        "worker hub",
                    ),
                    _reports: reports,
                })
            }
            Err(e) => {
                tracing::debug!("worker hub: no Unix socket ({e}); local workers use TCP");
                None
            }
        };
        Ok(Hub { address, socket, routes, token, _shutdown: shutdown })
    }

    /// The URL workers on this machine connect to: the Unix socket where there is one.
    pub(crate) fn local_url(&self) -> String {
        match &self.socket {
            Some(s) => format!("{UNIX_SCHEME}{}", s.name),
            None => self.url(),
        }
    }

    /// The token workers must present, if any.
    pub(crate) fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The address workers reach it on.
    pub(crate) fn ip(&self) -> std::net::IpAddr {
        self.address.ip()
    }

    /// The URL workers connect to.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Routes calls naming `group`, a group of trial `trial`, to the returned receiver until it
    /// is dropped or unregistered.
    pub(crate) fn register(&self, group: &str, trial: &str) -> mpsc::UnboundedReceiver<HubCall> {
        let (tx, rx) = mpsc::unbounded_channel();
        let route = (trial.to_owned(), tx);
        self.routes.write().expect("routes lock").insert(group.to_owned(), route);
        rx
    }

    /// Asks each running group of trial `trial` (of every trial when None) where its ranks are.
    pub(crate) async fn stacks(&self, trial: Option<&str>) -> Vec<crate::proto::TrialStacks> {
        let owners: Vec<mpsc::UnboundedSender<HubCall>> = {
            let routes = self.routes.read().expect("routes lock");
            let chosen = routes.values().filter(|(t, _)| trial.is_none_or(|wanted| t == wanted));
            chosen.map(|(_, owner)| owner.clone()).collect()
        };
        let mut found = Vec::new();
        for owner in owners {
            // A group that ended meanwhile has nothing to say.
            if let Ok(stacks) = ask(&owner, HubCall::Stacks, |_| Status::aborted("ended")).await {
                found.push(stacks);
            }
        }
        found
    }

    pub(crate) fn unregister(&self, group: &str) {
        self.routes.write().expect("routes lock").remove(group);
    }
}

/// Serves the report socket until the returned sender is dropped (which also ends the
/// connections it has): a task per worker connection.
fn serve_reports(
    listener: tokio::net::UnixListener,
    routes: Routes,
    token: Option<String>,
) -> tokio::sync::watch::Sender<()> {
    let (shutdown, stopped) = tokio::sync::watch::channel(());
    tokio::spawn(async move {
        let mut ended = stopped.clone();
        loop {
            let stream = tokio::select! {
                _ = ended.changed() => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::warn!("worker hub: report socket: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                },
            };
            let (routes, token, mut ended) = (routes.clone(), token.clone(), stopped.clone());
            tokio::spawn(async move {
                tokio::select! {
                    _ = ended.changed() => {}
                    served = serve_report_connection(stream, &routes, token.as_deref()) => {
                        if let Err(e) = served {
                            tracing::debug!("worker hub: a report connection ended: {e}");
                        }
                    }
                }
            });
        }
    });
    shutdown
}

/// One worker's report connection: its hello (answered: accepted, or refused without the hub's
/// token), then each report handed on as it comes and answered in order, as on the stream.
async fn serve_report_connection(
    stream: tokio::net::UnixStream,
    routes: &Routes,
    token: Option<&str>,
) -> std::io::Result<()> {
    let mut socket = frame::Answering::new(stream)?;
    let Some(hello) = socket.read::<ReportHello>().await? else { return Ok(()) };
    if !token_matches(&hello.token, token) {
        let refused = Answer::Error(format!("{HUB_ONLY} (wrong or no token)"));
        return socket.answer(&ReportAnswer { answer: Some(refused) });
    }
    socket.answer(&ReportAnswer { answer: None })?;
    while let Some(request) = socket.read::<ReportRequest>().await? {
        let key = request.key.clone();
        let answer = match forward(routes, key.as_ref(), |r| HubCall::Report(request, r)).await {
            Ok(reply) => Answer::Reply(reply),
            Err(status) => Answer::Error(status.message().to_owned()),
        };
        socket.answer(&ReportAnswer { answer: Some(answer) })?;
    }
    Ok(())
}

/// An abstract Unix socket named `name` (the hub's is named after the driver and its port).
fn unix_listener(name: String) -> std::io::Result<(String, tokio::net::UnixListener)> {
    use std::os::linux::net::SocketAddrExt;
    let at = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let listener = std::os::unix::net::UnixListener::bind_addr(&at)?;
    listener.set_nonblocking(true)?;
    Ok((name, tokio::net::UnixListener::from_std(listener)?))
}

struct HubService {
    routes: Routes,
}

/// Hands a call to the owner of the group its `key` names and waits for the answer.
async fn forward<T>(
    routes: &Routes,
    key: Option<&WorkerKey>,
    call: impl FnOnce(Reply<T>) -> HubCall,
) -> std::result::Result<T, Status> {
    let group = key.map(|k| k.group.as_str()).unwrap_or_default();
    let route = routes.read().expect("routes lock").get(group).map(|(_, owner)| owner.clone());
    let Some(route) = route else {
        return Err(Status::not_found(format!("no running worker group {group:?}")));
    };
    let gone = |why| match why {
        Unanswered::NotDelivered => {
            Status::unavailable(format!("worker group {group:?} has ended"))
        }
        Unanswered::Dropped => Status::aborted(format!("worker group {group:?} ended the attempt")),
    };
    ask(&route, call, gone).await
}

type ReplyStream = std::pin::Pin<
    Box<dyn tokio_stream::Stream<Item = std::result::Result<ReportReply, Status>> + Send>,
>;

#[tonic::async_trait]
impl WorkerHub for HubService {
    type ReportsStream = ReplyStream;

    async fn join(
        &self,
        request: Request<JoinRequest>,
    ) -> std::result::Result<Response<JoinReply>, Status> {
        let request = request.into_inner();
        let key = request.key.clone();
        forward(&self.routes, key.as_ref(), |reply| HubCall::Join(request, reply))
            .await
            .map(Response::new)
    }

    /// Each report of the stream is handed on as it comes and answered in order (the worker
    /// waits for the answer before its next report, so there is one in flight at most).
    async fn reports(
        &self,
        request: Request<Streaming<ReportRequest>>,
    ) -> std::result::Result<Response<Self::ReportsStream>, Status> {
        let routes = self.routes.clone();
        let replies = request.into_inner().then(move |message| {
            let routes = routes.clone();
            async move {
                let request = message?;
                let key = request.key.clone();
                forward(&routes, key.as_ref(), |reply| HubCall::Report(request, reply)).await
            }
        });
        Ok(Response::new(Box::pin(replies)))
    }

    async fn finish(
        &self,
        request: Request<FinishRequest>,
    ) -> std::result::Result<Response<FinishReply>, Status> {
        let request = request.into_inner();
        let key = request.key.clone();
        forward(&self.routes, key.as_ref(), |reply| HubCall::Finish(request, reply))
            .await
            .map(Response::new)
    }

    async fn regroup(
        &self,
        request: Request<RegroupRequest>,
    ) -> std::result::Result<Response<RegroupReply>, Status> {
        let request = request.into_inner();
        let key = request.key.clone();
        forward(&self.routes, key.as_ref(), |reply| HubCall::Regroup(request, reply))
            .await
            .map(Response::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::worker_hub_client::WorkerHubClient;
    use crate::rpc::AddToken;

    /// A hub with a token serves only calls that carry it (the rest never reach a group).
    #[tokio::test]
    async fn a_hub_with_a_token_refuses_calls_without_it() {
        let hub = Hub::start(([127, 0, 0, 1], 0).into(), Some("s3cret".into())).await.unwrap();
        let join = || JoinRequest {
            key: Some(WorkerKey { group: "g".into(), attempt: 0, rank: 0 }),
            ..Default::default()
        };
        for (token, refused) in [(None, true), (Some("wrong"), true), (Some("s3cret"), false)] {
            let channel = tonic::transport::Endpoint::from_shared(hub.url())
                .unwrap()
                .connect()
                .await
                .unwrap();
            let auth = AddToken::bearer(token).unwrap();
            let mut client = WorkerHubClient::with_interceptor(channel, auth);
            let status = client.join(join()).await.unwrap_err();
            // Past the check, the call is refused for naming no running group instead.
            let code = if refused { tonic::Code::Unauthenticated } else { tonic::Code::NotFound };
            assert_eq!(status.code(), code, "token {token:?}: {status}");
        }
    }

    /// Frames on the report socket reach the group's owner and come back with its answers, in
    /// order; a hello without the hub's token is refused before any report is read, and a report
    /// for a group that is not running is answered with why.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_report_socket_answers_reports_and_refuses_strangers() {
        let hub = Hub::start(([127, 0, 0, 1], 0).into(), Some("s3cret".into())).await.unwrap();
        let socket = hub.local_url().strip_prefix(UNIX_SCHEME).unwrap().to_owned();
        let mut calls = hub.register("g", "");
        // The group's owner: answers report n with stop = (n == 3), at iteration 10 + n.
        tokio::spawn(async move {
            while let Some(call) = calls.recv().await {
                if let HubCall::Report(request, reply) = call {
                    let seq = request.seq;
                    let _ = reply.send(Ok(ReportReply {
                        stop: seq == 3,
                        training_iteration: 10 + seq,
                        regroup: false,
                    }));
                }
            }
        });
        let talk = move |token: &str, reports: Vec<(&str, u64)>| {
            let stream = crate::rpc::connect_abstract(&report_socket_name(&socket)).unwrap();
            let mut stream = std::io::BufReader::new(stream);
            let hello = ReportHello { token: token.into() };
            let answer: ReportAnswer = frame::exchange(&mut stream, &hello).unwrap();
            let mut answers = vec![answer.answer];
            for (group, seq) in reports {
                let key = WorkerKey { group: group.into(), attempt: 0, rank: 0 };
                let request = ReportRequest { key: Some(key), seq, ..Default::default() };
                let answer: ReportAnswer = frame::exchange(&mut stream, &request).unwrap();
                answers.push(answer.answer);
            }
            answers
        };
        let answers = tokio::task::spawn_blocking({
            let talk = talk.clone();
            move || talk("s3cret", vec![("g", 1), ("g", 2), ("g", 3), ("other", 4)])
        })
        .await
        .unwrap();
        let reply = |stop, training_iteration| {
            Some(Answer::Reply(ReportReply { stop, training_iteration, regroup: false }))
        };
        assert_eq!(answers[..4], [None, reply(false, 11), reply(false, 12), reply(true, 13)]);
        match &answers[4] {
            Some(Answer::Error(why)) => assert!(why.contains("\"other\""), "{why}"),
            other => panic!("a report for no running group was answered {other:?}"),
        }

        let refused = tokio::task::spawn_blocking(move || talk("wrong", vec![])).await.unwrap();
        match &refused[0] {
            Some(Answer::Error(why)) => assert!(why.contains("wrong or no token"), "{why}"),
            other => panic!("a hello with a wrong token was answered {other:?}"),
        }
    }
}
