//! Keep-alive HTTP/1 connections to the workers, each driven by the request that holds it.
//!
//! A pooled client whose connections run as tasks of their own hands a response body over one
//! chunk per scheduler turn: its connection task decodes a chunk, waits until the body's reader
//! takes it, and only then decodes the next, so a relay writes one SSE event (one token) per
//! `writev` to the client. Here nobody else polls a connection: the try polls it while waiting
//! for the answer's head, and the answer's [`WorkerBody`] polls it while reading, taking every
//! chunk that the bytes already read hold in one go. A streamed answer then reaches the client
//! in as many writes as the worker's bytes arrived in reads.
//!
//! Enters: a [`WorkerRequest`] for a worker's `http://` URL. Leaves: the answer's head and its
//! [`WorkerBody`]; the connection goes back to the pool when the body has ended, and is closed
//! (which cancels the request on the worker) when the body is dropped before its end.

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{Builder, Connection, SendRequest};
use hyper::http::{HeaderMap, HeaderValue, Method, Request, Uri, header, response};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Idle connections kept per worker; more are closed when their answers end.
const MAX_IDLE_PER_WORKER: usize = 256;
/// At most this many bytes of chunks are joined into one frame for the client.
const MAX_JOINED_BYTES: usize = 64 * 1024;

/// One request to a worker.
pub struct WorkerRequest {
    /// The method (`POST` for generations, `GET` for the health probe).
    pub method: Method,
    /// The worker URL (`http://host:port/path`).
    pub url: Uri,
    /// The headers to send (`host` is set from the URL).
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

/// Why a request got no answer head.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The URL has no host.
    #[error("the worker URL `{0}` has no host")]
    NoHost(Uri),
    /// No connection within the connect timeout.
    #[error("connecting to {authority} timed out after {timeout:?}")]
    ConnectTimedOut {
        /// `host:port`.
        authority: String,
        /// The connect timeout.
        timeout: Duration,
    },
    /// The connection could not be made.
    #[error("connecting to {authority} failed: {source}")]
    Connect {
        /// `host:port`.
        authority: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// HTTP failed on the connection (refused request, closed connection, malformed answer).
    #[error(transparent)]
    Http(#[from] hyper::Error),
}

/// The gateway's connections to its workers, pooled per `host:port`.
#[derive(Clone)]
pub struct WorkerConnections {
    pool: Arc<Pool>,
}

struct Pool {
    idle: Mutex<HashMap<String, Vec<IdleConnection>>>,
    connect_timeout: Duration,
    idle_timeout: Duration,
}

struct IdleConnection {
    connection: DrivenConnection,
    since: Instant,
}

/// A connection and the future that runs its protocol, polled by whoever holds both.
struct DrivenConnection {
    sender: SendRequest<Full<Bytes>>,
    /// `None` once the connection has ended.
    driver: Option<Connection<TokioIo<TcpStream>, Full<Bytes>>>,
}

impl DrivenConnection {
    /// Runs the connection's protocol as far as it can go now; false once it has ended.
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        if let Some(driver) = self.driver.as_mut()
            && let Poll::Ready(result) = Pin::new(driver).poll(cx)
        {
            if let Err(error) = result {
                tracing::debug!(%error, "a worker connection ended with an error");
            }
            self.driver = None;
        }
        self.driver.is_some()
    }

    /// Waits until the connection can take a request (a kept one may have been closed by the
    /// worker meanwhile: then an error).
    async fn ready(&mut self) -> Result<(), hyper::Error> {
        poll_fn(|cx| {
            self.drive(cx);
            self.sender.poll_ready(cx)
        })
        .await
    }

    /// Sends `request` and waits for the answer's head, driving the connection meanwhile.
    async fn send(
        &mut self,
        request: Request<Full<Bytes>>,
    ) -> Result<hyper::Response<Incoming>, hyper::Error> {
        let mut answer = pin!(self.sender.send_request(request));
        poll_fn(|cx| {
            self.drive(cx);
            answer.as_mut().poll(cx)
        })
        .await
    }
}

impl WorkerConnections {
    /// Connections made within `connect_timeout` and kept idle for at most `idle_timeout`.
    pub fn new(connect_timeout: Duration, idle_timeout: Duration) -> Self {
        Self {
            pool: Arc::new(Pool {
                idle: Mutex::new(HashMap::new()),
                connect_timeout,
                idle_timeout,
            }),
        }
    }

    /// Sends `request` on a kept connection to its worker, or on a new one, and returns the
    /// answer's head and body. A kept connection that turns out closed before the request
    /// went out is replaced by the next one (or a new one); a failure after that is returned.
    pub async fn send(
        &self,
        request: WorkerRequest,
    ) -> Result<(response::Parts, WorkerBody), SendError> {
        let authority = authority(&request.url)?;
        loop {
            let (mut connection, kept) = match self.pool.checkout(&authority) {
                Some(connection) => (connection, true),
                None => (self.pool.connect(&authority).await?, false),
            };
            if let Err(error) = connection.ready().await {
                if kept {
                    continue;
                }
                return Err(error.into());
            }
            match connection.send(hyper_request(&request, &authority)).await {
                Ok(answer) => {
                    let (head, incoming) = answer.into_parts();
                    let body = WorkerBody::new(incoming, connection, &self.pool, authority);
                    return Ok((head, body));
                }
                // Canceled: the request was never written (the kept connection was closing).
                Err(error) if kept && error.is_canceled() => continue,
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Idle connections kept to `authority` (`host:port`).
    pub fn idle_connections(&self, authority: &str) -> usize {
        self.pool.idle.lock().get(authority).map_or(0, Vec::len)
    }
}

impl Pool {
    /// The most recently kept connection to `authority` that is still open and not too old.
    fn checkout(&self, authority: &str) -> Option<DrivenConnection> {
        let mut idle = self.idle.lock();
        let kept = idle.get_mut(authority)?;
        let now = Instant::now();
        while let Some(entry) = kept.pop() {
            if now.duration_since(entry.since) < self.idle_timeout
                && !entry.connection.sender.is_closed()
            {
                return Some(entry.connection);
            }
        }
        None
    }

    /// Keeps `connection` for the next request to `authority`, if it is still open.
    fn keep(&self, authority: String, connection: DrivenConnection) {
        if connection.driver.is_none() || connection.sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock();
        let kept = idle.entry(authority).or_default();
        if kept.len() < MAX_IDLE_PER_WORKER {
            kept.push(IdleConnection {
                connection,
                since: Instant::now(),
            });
        }
    }

    async fn connect(&self, authority: &str) -> Result<DrivenConnection, SendError> {
        let timeout = self.connect_timeout;
        let stream = tokio::time::timeout(timeout, TcpStream::connect(authority))
            .await
            .map_err(|_| SendError::ConnectTimedOut {
                authority: authority.to_owned(),
                timeout,
            })?
            .map_err(|source| SendError::Connect {
                authority: authority.to_owned(),
                source,
            })?;
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, authority, "could not set TCP_NODELAY");
        }
        let (sender, driver) = Builder::new().handshake(TokioIo::new(stream)).await?;
        Ok(DrivenConnection {
            sender,
            driver: Some(driver),
        })
    }
}

/// `host:port` of an `http://` URL (port 80 when it names none).
fn authority(url: &Uri) -> Result<String, SendError> {
    let host = url.host().ok_or_else(|| SendError::NoHost(url.clone()))?;
    Ok(format!("{host}:{}", url.port_u16().unwrap_or(80)))
}

/// The request as it goes on the wire: origin-form target, `host` from the URL.
fn hyper_request(request: &WorkerRequest, authority: &str) -> Request<Full<Bytes>> {
    let mut out = Request::new(Full::new(request.body.clone()));
    *out.method_mut() = request.method.clone();
    *out.uri_mut() = request
        .url
        .path_and_query()
        .map_or_else(|| Uri::from_static("/"), |path| Uri::from(path.clone()));
    *out.headers_mut() = request.headers.clone();
    let host = request.url.authority().map_or(authority, |a| a.as_str());
    if let Ok(value) = HeaderValue::from_str(host) {
        out.headers_mut().insert(header::HOST, value);
    }
    out
}

/// A worker's answer body, read by driving its connection: each frame joins the chunks that
/// have arrived (up to 64 KiB). At its end the connection returns to the pool; dropped before
/// it, the connection closes.
pub struct WorkerBody {
    incoming: Incoming,
    connection: Option<DrivenConnection>,
    pool: Arc<Pool>,
    authority: String,
    /// A frame that was not data (trailers), or an error, read behind joined data.
    held: Option<Result<Frame<Bytes>, hyper::Error>>,
    ended: bool,
}

impl WorkerBody {
    fn new(
        incoming: Incoming,
        connection: DrivenConnection,
        pool: &Arc<Pool>,
        authority: String,
    ) -> Self {
        let mut body = Self {
            incoming,
            connection: Some(connection),
            pool: Arc::clone(pool),
            authority,
            held: None,
            ended: false,
        };
        if body.incoming.is_end_stream() {
            body.release();
        }
        body
    }

    /// The body has been read to its end: the connection can serve another request.
    fn release(&mut self) {
        if let Some(connection) = self.connection.take() {
            self.pool
                .keep(std::mem::take(&mut self.authority), connection);
        }
    }
}

impl Body for WorkerBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if let Some(held) = this.held.take() {
            return Poll::Ready(Some(held));
        }
        let mut joined = Joined::default();
        while !this.ended {
            if let Some(connection) = this.connection.as_mut() {
                connection.drive(cx);
            }
            match Pin::new(&mut this.incoming).poll_frame(cx) {
                Poll::Pending => break,
                Poll::Ready(None) => this.ended = true,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        joined.push(data);
                        if joined.len() >= MAX_JOINED_BYTES {
                            break;
                        }
                    }
                    Err(other) => {
                        this.held = Some(Ok(other));
                        break;
                    }
                },
                Poll::Ready(Some(Err(error))) => {
                    this.connection = None;
                    this.ended = true;
                    this.held = Some(Err(error));
                    break;
                }
            }
            if this.incoming.is_end_stream() {
                this.ended = true;
            }
        }
        // After an error the connection was dropped already: there is nothing to keep.
        if this.ended {
            this.release();
        }
        match joined.into_bytes() {
            Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
            None => match this.held.take() {
                Some(held) => Poll::Ready(Some(held)),
                None if this.ended => Poll::Ready(None),
                None => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && (self.ended || self.incoming.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

/// Data chunks joined into one frame, copied only when there is more than one.
#[derive(Default)]
enum Joined {
    #[default]
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl Joined {
    fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        *self = match std::mem::take(self) {
            Joined::Empty => Joined::One(data),
            Joined::One(first) => {
                let mut many = BytesMut::with_capacity((first.len() + data.len()) * 4);
                many.extend_from_slice(&first);
                many.extend_from_slice(&data);
                Joined::Many(many)
            }
            Joined::Many(mut many) => {
                many.extend_from_slice(&data);
                Joined::Many(many)
            }
        };
    }

    fn len(&self) -> usize {
        match self {
            Joined::Empty => 0,
            Joined::One(data) => data.len(),
            Joined::Many(data) => data.len(),
        }
    }

    fn into_bytes(self) -> Option<Bytes> {
        match self {
            Joined::Empty => None,
            Joined::One(data) => Some(data),
            Joined::Many(data) => Some(data.freeze()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A worker on 127.0.0.1 that answers every request on a connection with `answer`
    /// (written in one write), counts the connections it accepted, and closes a connection
    /// after `requests_per_connection` answers.
    async fn worker(answer: Vec<u8>, requests_per_connection: usize) -> (Uri, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url: Uri = format!(
            "http://{}/v1/completions",
            listener.local_addr().expect("addr")
        )
        .parse()
        .expect("url");
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 16 * 1024];
                    for _ in 0..requests_per_connection {
                        let mut read = Vec::new();
                        while !read.windows(4).any(|w| w == b"\r\n\r\n") {
                            match socket.read(&mut buffer).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => read.extend_from_slice(&buffer[..n]),
                            }
                        }
                        if socket.write_all(&answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    /// A chunked answer of `events` SSE events, one chunk each.
    fn chunked_sse(events: usize) -> Vec<u8> {
        let mut answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for index in 0..events {
            let event = format!("data: {{\"token\":{index}}}\n\n");
            answer.extend_from_slice(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes());
        }
        answer.extend_from_slice(b"0\r\n\r\n");
        answer
    }

    fn request(url: &Uri) -> WorkerRequest {
        WorkerRequest {
            method: Method::POST,
            url: url.clone(),
            headers: HeaderMap::new(),
            body: Bytes::from_static(b"{}"),
        }
    }

    fn connections() -> WorkerConnections {
        WorkerConnections::new(Duration::from_secs(2), Duration::from_secs(90))
    }

    #[tokio::test]
    async fn chunks_that_arrived_together_reach_the_client_as_one_frame() {
        let (url, _) = worker(chunked_sse(256), 1).await;
        let (head, mut body) = connections().send(request(&url)).await.expect("answer");
        assert_eq!(head.status, 200);
        let mut frames = 0;
        let mut text = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.expect("frame").into_data().expect("data");
            text.extend_from_slice(&data);
            frames += 1;
        }
        let text = String::from_utf8(text).expect("utf-8");
        assert_eq!(text.matches("data: ").count(), 256);
        assert!(text.ends_with("data: {\"token\":255}\n\n"), "{text}");
        // One write of 256 chunks: a few reads, not one frame per chunk.
        assert!(
            frames <= 8,
            "{frames} frames for 256 chunks written at once"
        );
    }

    #[tokio::test]
    async fn a_connection_is_kept_after_its_answer_ended_and_reused() {
        let (url, accepted) = worker(chunked_sse(3), 10).await;
        let connections = connections();
        let authority = authority(&url).expect("authority");
        for _ in 0..5 {
            let (_, body) = connections.send(request(&url)).await.expect("answer");
            let text = body.collect().await.expect("body").to_bytes();
            assert_eq!(text.len(), 3 * "data: {\"token\":0}\n\n".len());
            assert_eq!(connections.idle_connections(&authority), 1);
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one connection for five requests"
        );
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_closes_its_connection() {
        let (url, accepted) = worker(chunked_sse(3), 10).await;
        let connections = connections();
        let (_, body) = connections.send(request(&url)).await.expect("answer");
        drop(body);
        assert_eq!(
            connections.idle_connections(&authority(&url).expect("a")),
            0
        );
        let (_, body) = connections.send(request(&url)).await.expect("answer");
        body.collect().await.expect("body");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_kept_connection_the_worker_closed_is_replaced() {
        // The worker closes every connection after one answer.
        let (url, accepted) = worker(
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(),
            1,
        )
        .await;
        let connections = connections();
        for _ in 0..3 {
            let (head, body) = connections.send(request(&url)).await.expect("answer");
            assert_eq!(head.status, 200);
            assert_eq!(body.collect().await.expect("body").to_bytes(), "ok");
            // Let the worker's close arrive before the next request.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url: Uri = format!("http://{}/x", listener.local_addr().expect("addr"))
            .parse()
            .expect("url");
        drop(listener);
        let error = connections()
            .send(request(&url))
            .await
            .err()
            .expect("refused");
        assert!(matches!(error, SendError::Connect { .. }), "{error}");
        assert!(
            error.to_string().starts_with("connecting to 127.0.0.1:"),
            "{error}"
        );
    }
}
