//! The exporter's HTTP(S) endpoint: hyper's HTTP/1 server on the tokio runtime, one task
//! per connection, bounded in number ([`conns`]) and in time, basic auth ([`auth`], off
//! this thread) and TLS from the web configuration. `/metrics` asks the command loop for
//! fresh figures and encodes them in the format the scraper accepts; `/` says what is
//! there; anything else is a 4xx.
use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use http_body_util::Full;
use hyper::{
    body::{Bytes, Incoming},
    header, Method, Request, Response, StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::TcpListener,
    sync::{mpsc, oneshot},
};
use tokio_rustls::TlsAcceptor;

use super::{
    auth::{Auth, Verdict},
    conns::{Conns, Slot},
};
use crate::output::openmetrics::{self, Format};

/// A client gets this long for its TLS handshake, and for each request's headers (so
/// also for the next request on a kept-alive connection).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// And this long for the whole connection (keep-alive included).
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(120);

/// What the endpoint shares with the command loop.
#[derive(Clone)]
pub struct Shared {
    /// Asks the command loop to refresh the figures; it answers when they are.
    pub refresh: mpsc::Sender<oneshot::Sender<()>>,
    pub exposition: Arc<std::sync::Mutex<crate::model::series::Exposition>>,
    pub auth: Arc<Auth>,
    /// The `/` page.
    pub index: Arc<String>,
}

/// Accepts connections until the listener fails or the task is dropped. Every
/// connection is accepted at once (nothing waits in the kernel's queue behind idle
/// clients); `conns` makes room by closing the longest-waiting ones.
pub async fn serve(listener: TcpListener, tls: Option<TlsAcceptor>, shared: Shared) {
    let conns = Arc::new(Conns::default());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and friends: wait a little rather than spin.
                log::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let slot = Arc::new(conns.admit(peer.ip()));
        let shared = shared.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let close = slot.close.clone();
            let work = async {
                match tls {
                    Some(acc) => {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acc.accept(stream)).await {
                            Ok(Ok(s)) => connection(TokioIo::new(s), shared, peer, slot).await,
                            Ok(Err(e)) => log::info!("TLS handshake with {peer}: {e}"),
                            Err(_) => log::info!("TLS handshake with {peer}: timed out"),
                        }
                    }
                    None => connection(TokioIo::new(stream), shared, peer, slot).await,
                }
            };
            tokio::select! {
                _ = tokio::time::timeout(CONNECTION_TIMEOUT, work) => {}
                _ = close.notified() => log::debug!("connection from {peer} closed to make room"),
            }
        });
    }
}

async fn connection<IO>(io: TokioIo<IO>, shared: Shared, peer: SocketAddr, slot: Arc<Slot>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        let slot = slot.clone();
        async move {
            // Busy from the headers to the response: not to be closed to make room.
            slot.busy();
            let r = respond(req, &shared).await;
            slot.done();
            Ok::<_, Infallible>(r)
        }
    });
    let r = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT)
        .serve_connection(io, service)
        .await;
    if let Err(e) = r {
        log::debug!("connection from {peer}: {e}");
    }
}

fn plain(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn respond(req: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match shared.auth.check(auth).await {
        Verdict::Admitted => {}
        Verdict::Refused => {
            let mut r = plain(StatusCode::UNAUTHORIZED, "Unauthorized\n");
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"tracer\""),
            );
            return r;
        }
        Verdict::Busy => {
            let mut r = plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many password checks at once: retry\n",
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return r;
        }
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        r.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match req.uri().path() {
        "/metrics" => {
            let format = Format::from_accept(
                req.headers()
                    .get(header::ACCEPT)
                    .and_then(|v| v.to_str().ok()),
            );
            let (tx, rx) = oneshot::channel();
            if shared.refresh.send(tx).await.is_err() || rx.await.is_err() {
                return plain(StatusCode::SERVICE_UNAVAILABLE, "the tracer is stopping\n");
            }
            match openmetrics::encode(shared.exposition.clone(), format) {
                Ok(body) => {
                    let mut r = plain(StatusCode::OK, body);
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        header::HeaderValue::from_static(format.content_type()),
                    );
                    r
                }
                Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n"),
            }
        }
        "/" => {
            let mut r = plain(StatusCode::OK, shared.index.as_bytes().to_vec());
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/html; charset=utf-8"),
            );
            r
        }
        _ => plain(StatusCode::NOT_FOUND, "not found: try /metrics\n"),
    }
}
