//! A small HTTP/1.1 keep-alive client for talking to the service over loopback: what the
//! tests, the load test and the benchmarks use (no client-library dependency, one connection
//! per client, `Content-Length` bodies as the service sends them).

use std::net::SocketAddr;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// How long a request waits for its answer: a stalled server fails the caller instead of
/// hanging it (tests stay bounded in time).
pub const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// One HTTP answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpAnswer {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

impl HttpAnswer {
    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One keep-alive connection to the service.
pub struct LoopbackClient {
    address: SocketAddr,
    stream: BufReader<TcpStream>,
    request: Vec<u8>,
    body_limit: usize,
}

impl LoopbackClient {
    /// Connects to `address`.
    pub async fn connect(address: SocketAddr) -> std::io::Result<Self> {
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            address,
            stream: BufReader::new(stream),
            request: Vec::with_capacity(1024),
            body_limit: usize::MAX,
        })
    }

    /// The same client refusing answers whose body exceeds `bytes` (an `InvalidData` error,
    /// before the body is read; the connection is then unusable).
    pub fn with_body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    fn check_body_size(&self, bytes: usize) -> std::io::Result<()> {
        if bytes <= self.body_limit {
            return Ok(());
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "the answer's body exceeds the limit of {} bytes ({bytes} bytes or more)",
                self.body_limit
            ),
        ))
    }

    /// `GET path`.
    pub async fn get(&mut self, path: &str) -> std::io::Result<HttpAnswer> {
        self.send("GET", path, None).await
    }

    /// `DELETE path`.
    pub async fn delete(&mut self, path: &str) -> std::io::Result<HttpAnswer> {
        self.send("DELETE", path, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&mut self, path: &str, body: &[u8]) -> std::io::Result<HttpAnswer> {
        self.send("POST", path, Some(body)).await
    }

    /// `POST path` with `value` as its JSON body.
    pub async fn post_json(
        &mut self,
        path: &str,
        value: &serde_json::Value,
    ) -> std::io::Result<HttpAnswer> {
        let body = serde_json::to_vec(value).map_err(std::io::Error::other)?;
        self.send("POST", path, Some(&body)).await
    }

    /// `PATCH path` with `value` as its JSON body.
    pub async fn patch_json(
        &mut self,
        path: &str,
        value: &serde_json::Value,
    ) -> std::io::Result<HttpAnswer> {
        let body = serde_json::to_vec(value).map_err(std::io::Error::other)?;
        self.send("PATCH", path, Some(&body)).await
    }

    /// Sends one request and reads its answer.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> std::io::Result<HttpAnswer> {
        self.send_with_headers(method, path, &[], body).await
    }

    /// Sends one request with `headers` (name, value) besides `Host` and the body's, and
    /// reads its answer.
    pub async fn send_with_headers(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> std::io::Result<HttpAnswer> {
        self.request.clear();
        self.request.extend_from_slice(
            format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.address).as_bytes(),
        );
        for (name, value) in headers {
            self.request
                .extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        if let Some(body) = body {
            self.request.extend_from_slice(
                format!(
                    "Content-Type: application/json\r\nContent-Length: {}\r\n",
                    body.len()
                )
                .as_bytes(),
            );
        }
        self.request.extend_from_slice(b"\r\n");
        if let Some(body) = body {
            self.request.extend_from_slice(body);
        }
        self.stream.get_mut().write_all(&self.request).await?;
        tokio::time::timeout(ANSWER_TIMEOUT, self.read_answer())
            .await
            .map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "{method} {path}: no answer from {} within {ANSWER_TIMEOUT:?}",
                        self.address
                    ),
                )
            })?
    }

    async fn read_answer(&mut self) -> std::io::Result<HttpAnswer> {
        let mut line = String::new();
        self.stream.read_line(&mut line).await?;
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
        let mut length = None;
        let mut chunked = false;
        loop {
            line.clear();
            if self.stream.read_line(&mut line).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.parse().ok();
                } else if name.eq_ignore_ascii_case("transfer-encoding")
                    && value.eq_ignore_ascii_case("chunked")
                {
                    chunked = true;
                }
            }
        }
        let body = if chunked {
            self.read_chunked().await?
        } else {
            self.check_body_size(length.unwrap_or(0))?;
            let mut body = vec![0; length.unwrap_or(0)];
            self.stream.read_exact(&mut body).await?;
            body
        };
        Ok(HttpAnswer { status, body })
    }

    async fn read_chunked(&mut self) -> std::io::Result<Vec<u8>> {
        let mut body = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            self.stream.read_line(&mut line).await?;
            let size = usize::from_str_radix(line.trim(), 16).map_err(std::io::Error::other)?;
            self.check_body_size(body.len().saturating_add(size))?;
            let mut chunk = vec![0; size + 2];
            self.stream.read_exact(&mut chunk).await?;
            if size == 0 {
                return Ok(body);
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
}
