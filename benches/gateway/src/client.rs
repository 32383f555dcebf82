//! A light HTTP/1.1 client (hyper-util's pooled client) for the load generator.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

#[derive(Clone)]
pub struct Client {
    inner: HyperClient<HttpConnector, Full<Bytes>>,
}

/// One answer: status and the body's last bytes (to check `[DONE]`).
pub struct Answer {
    pub status: u16,
    pub tail: Vec<u8>,
}

impl Answer {
    pub fn ok(&self) -> bool {
        self.status == 200
    }

    pub fn stream_done(&self) -> bool {
        self.tail.windows(6).any(|window| window == b"[DONE]")
    }
}

impl Client {
    pub fn new(pool: usize) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let inner = HyperClient::builder(TokioExecutor::new())
            .pool_max_idle_per_host(pool)
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector);
        Client { inner }
    }

    /// POSTs `body` (JSON) and reads the whole answer.
    pub async fn post(&self, url: &str, body: Bytes) -> Result<Answer, String> {
        let request = hyper::Request::post(url)
            .header("content-type", "application/json")
            .body(Full::new(body))
            .map_err(|error| error.to_string())?;
        self.send(request).await
    }

    pub async fn get(&self, url: &str) -> Result<(u16, Bytes), String> {
        let request = hyper::Request::get(url)
            .body(Full::new(Bytes::new()))
            .map_err(|error| error.to_string())?;
        let response = self
            .inner
            .request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|error| error.to_string())?
            .to_bytes();
        Ok((status, body))
    }

    async fn send(&self, request: hyper::Request<Full<Bytes>>) -> Result<Answer, String> {
        let response = self
            .inner
            .request(request)
            .await
            .map_err(|error| format!("{error:?}"))?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut tail: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|error| error.to_string())?;
            if let Some(data) = frame.data_ref() {
                tail.extend_from_slice(data);
                if tail.len() > 64 {
                    tail.drain(..tail.len() - 64);
                }
            }
        }
        Ok(Answer { status, tail })
    }
}
