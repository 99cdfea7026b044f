//! The driver's gRPC endpoint for worker processes (`rtune.v1.WorkerHub`).
//!
//! The service itself holds no run state: it forwards each call, with a reply slot, to the task
//! that owns the worker group the call names (its `group`), so each group's state has one owner.
//! Calls for a group that is not running are refused.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use tokio::sync::{mpsc, oneshot};
use tonic::{Request, Response, Status};

use crate::error::{Error, Result};
use crate::proto::worker_hub_server::{WorkerHub, WorkerHubServer};
use crate::proto::{
    FinishReply, FinishRequest, JoinReply, JoinRequest, ReportReply, ReportRequest, WorkerKey,
};

pub(crate) type Reply<T> = oneshot::Sender<std::result::Result<T, Status>>;

/// A worker's call, handed to the owner of its group.
#[derive(Debug)]
pub(crate) enum HubCall {
    Join(JoinRequest, Reply<JoinReply>),
    Report(ReportRequest, Reply<ReportReply>),
    Finish(FinishRequest, Reply<FinishReply>),
}

type Routes = Arc<RwLock<HashMap<String, mpsc::UnboundedSender<HubCall>>>>;

/// A running hub; stops serving when dropped.
pub(crate) struct Hub {
    address: SocketAddr,
    routes: Routes,
    _shutdown: oneshot::Sender<()>,
}

impl Hub {
    /// Serves on `bind` (port 0 picks a free one). Must be called inside a tokio runtime.
    pub(crate) async fn start(bind: SocketAddr) -> Result<Hub> {
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|e| Error::Worker(format!("worker hub cannot listen on {bind}: {e}")))?;
        let address = listener.local_addr().map_err(|e| Error::io("worker hub socket", e))?;
        let routes = Routes::default();
        let service = WorkerHubServer::new(HubService { routes: routes.clone() });
        let shutdown =
            serve_until_dropped(tonic::service::Routes::new(service), listener, "worker hub", None);
        Ok(Hub { address, routes, _shutdown: shutdown })
    }

    /// The URL workers connect to.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Routes calls naming `group` to the returned receiver until it is dropped or unregistered.
    pub(crate) fn register(&self, group: &str) -> mpsc::UnboundedReceiver<HubCall> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.routes.write().expect("routes lock").insert(group.to_owned(), tx);
        rx
    }

    pub(crate) fn unregister(&self, group: &str) {
        self.routes.write().expect("routes lock").remove(group);
    }
}

/// Serves `routes` on `listener` in the background until the returned sender is dropped. With
/// `keepalive`, HTTP/2 pings every that long drop a connection whose peer stops answering for as
/// long (a host that died without closing its sockets), which ends its streams.
pub(crate) fn serve_until_dropped(
    routes: tonic::service::Routes,
    listener: tokio::net::TcpListener,
    what: &'static str,
    keepalive: Option<std::time::Duration>,
) -> oneshot::Sender<()> {
    let (shutdown, stopped) = oneshot::channel::<()>();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(async move {
        let serve = tonic::transport::Server::builder()
            .http2_keepalive_interval(keepalive)
            .http2_keepalive_timeout(keepalive)
            .add_routes(routes)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            });
        if let Err(e) = serve.await {
            eprintln!("rtune: {what} stopped: {e}");
        }
    });
    shutdown
}

struct HubService {
    routes: Routes,
}

impl HubService {
    async fn forward<T>(
        &self,
        key: Option<&WorkerKey>,
        call: impl FnOnce(Reply<T>) -> HubCall,
    ) -> std::result::Result<Response<T>, Status> {
        let group = key.map(|k| k.group.as_str()).unwrap_or_default();
        let route = self.routes.read().expect("routes lock").get(group).cloned();
        let Some(route) = route else {
            return Err(Status::not_found(format!("no running worker group {group:?}")));
        };
        let (reply, answer) = oneshot::channel();
        route
            .send(call(reply))
            .map_err(|_| Status::unavailable(format!("worker group {group:?} has ended")))?;
        match answer.await {
            Ok(result) => result.map(Response::new),
            Err(_) => Err(Status::aborted(format!("worker group {group:?} ended the attempt"))),
        }
    }
}

#[tonic::async_trait]
impl WorkerHub for HubService {
    async fn join(
        &self,
        request: Request<JoinRequest>,
    ) -> std::result::Result<Response<JoinReply>, Status> {
        let request = request.into_inner();
        let key = request.key.clone();
        self.forward(key.as_ref(), |reply| HubCall::Join(request, reply)).await
    }

    async fn report(
        &self,
        request: Request<ReportRequest>,
    ) -> std::result::Result<Response<ReportReply>, Status> {
        let request = request.into_inner();
        let key = request.key.clone();
        self.forward(key.as_ref(), |reply| HubCall::Report(request, reply)).await
    }

    async fn finish(
        &self,
        request: Request<FinishRequest>,
    ) -> std::result::Result<Response<FinishReply>, Status> {
        let request = request.into_inner();
        let key = request.key.clone();
        self.forward(key.as_ref(), |reply| HubCall::Finish(request, reply)).await
    }
}
