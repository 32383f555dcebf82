//! Configuration reloads through `POST /admin/config`: the token guards the routes, a bad
//! configuration changes nothing and says where it is wrong, a good one swaps in whole, and 100
//! reloads under concurrent bookings lose, split or double no booking.

mod common;

use common::*;
use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource};
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_kv_router::router::{RouterOptions, RouterSetup};
use kv_router_service::SelectionService;
use kv_router_service::admin::{AdminRoutes, AdminToken, ConfigLoader, ConfigReloader};
use kv_router_service::engine_events::ingress::NoIngress;
use kv_router_service::http::loopback_client::{HttpAnswer, LoopbackClient};
use kv_router_service::serve::{BoundService, ServeOptions};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::oneshot;

const TOKEN: &str = "test-admin-token-0123";

/// Loads with every linked policy, as `kv-router serve` does.
struct LinkedLoader(PolicyRegistry);

impl ConfigLoader for LinkedLoader {
    fn load(&self, source: &ConfigSource) -> Result<RouterSetup, String> {
        config::load(source, &self.0, &ConfigOverrides::default())
            .map_err(|error| error.render(&source.text))
    }
}

/// A service on 127.0.0.1 port 0 running `yaml` (read from `file` when given), with the admin
/// routes guarded by [`TOKEN`] (off when `token` is false).
struct AdminService {
    address: SocketAddr,
    service: Arc<SelectionService>,
    _stop: oneshot::Sender<()>,
}

impl AdminService {
    async fn start(yaml: &str, file: Option<PathBuf>, token: bool) -> AdminService {
        let service = Arc::new(SelectionService::new(
            setup(yaml),
            RouterOptions::default(),
            Arc::new(NoIngress),
        ));
        let registry = PolicyRegistry::linked().expect("linked policies are consistent");
        let name = file
            .as_ref()
            .map_or("test.yaml".to_owned(), |path| path.display().to_string());
        let reloader = Arc::new(ConfigReloader::new(
            Arc::clone(&service),
            Box::new(LinkedLoader(registry)),
            file,
            &ConfigSource::new(name, yaml),
        ));
        service.add_metrics_source(Arc::clone(&reloader) as _);
        let token = token.then(|| AdminToken::new(TOKEN, "test").expect("a token"));
        let options = ServeOptions {
            host: "127.0.0.1".to_owned(),
            port: 0,
        };
        let bound = BoundService::bind(Arc::clone(&service), &options)
            .await
            .expect("bind 127.0.0.1:0")
            .with_admin(AdminRoutes::new(reloader, token));
        let address = bound.local_addr().expect("bound address");
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(bound.run(async move {
            let _ = stopped.await;
        }));
        AdminService {
            address,
            service,
            _stop: stop,
        }
    }

    async fn client(&self) -> LoopbackClient {
        LoopbackClient::connect(self.address)
            .await
            .expect("connect to the service")
    }
}

/// `method /admin/config` with the token (or `authorization` as given).
async fn admin(
    client: &mut LoopbackClient,
    method: &str,
    authorization: Option<&str>,
    body: Option<&str>,
) -> HttpAnswer {
    let bearer = format!("Bearer {TOKEN}");
    let authorization = authorization.unwrap_or(&bearer);
    let headers: Vec<(&str, &str)> = if authorization.is_empty() {
        Vec::new()
    } else {
        vec![("Authorization", authorization)]
    };
    client
        .send_with_headers(method, "/admin/config", &headers, body.map(str::as_bytes))
        .await
        .expect("an answer")
}

async fn running(client: &mut LoopbackClient) -> Value {
    let answer = admin(client, "GET", None, None).await;
    expect_status(&answer, 200);
    answer.json()
}

/// The value of the metric sample starting with `prefix` on `/metrics`.
async fn metric(client: &mut LoopbackClient, prefix: &str) -> Option<f64> {
    let text = client.get("/metrics").await.expect("metrics").text();
    text.lines()
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

fn booking(id: &str, prompt: &[u32]) -> Value {
    json!({"model_name": "m", "routing_group": "default", "selection_id": id, "token_ids": prompt})
}

#[tokio::test]
async fn the_admin_routes_are_off_without_a_token() {
    let service = AdminService::start(KVCR_YAML, None, false).await;
    let mut client = service.client().await;
    for method in ["GET", "POST"] {
        let answer = admin(&mut client, method, None, Some(DEFAULT_YAML)).await;
        expect_status(&answer, 404);
        let message = answer.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.contains("--admin-token-file") && message.contains("KV_ROUTER_ADMIN_TOKEN"),
            "{message}"
        );
    }
    assert_eq!(
        service.service.partitions().len(),
        0,
        "nothing was reloaded"
    );
}

#[tokio::test]
async fn the_token_guards_both_routes() {
    let service = AdminService::start(KVCR_YAML, None, true).await;
    let mut client = service.client().await;
    for method in ["GET", "POST"] {
        for authorization in ["", "Bearer wrong-token", "Basic dGVzdA==", "Bearer"] {
            let answer = admin(&mut client, method, Some(authorization), Some(DEFAULT_YAML)).await;
            expect_status(&answer, 401);
        }
    }
    // The scheme is case-insensitive.
    let lower = format!("bearer {TOKEN}");
    let answer = admin(&mut client, "GET", Some(&lower), None).await;
    expect_status(&answer, 200);
    assert_eq!(running(&mut client).await["version"], json!(1));
}

#[tokio::test]
async fn a_bad_configuration_changes_nothing_and_says_where() {
    let service = AdminService::start(KVCR_YAML, None, true).await;
    let mut client = service.client().await;
    let before = running(&mut client).await;
    let broken = "router_mode: kv\nblock_size: 16\nworker_selection:\n  aggregated:\n    type: kvcr\n    parameters: {shared_cache_multiplier: 7.5}\n";
    let answer = admin(&mut client, "POST", None, Some(broken)).await;
    expect_status(&answer, 422);
    let body = answer.json();
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains("POST /admin/config:6:"), "{error}");
    assert!(error.contains("shared_cache_multiplier"), "{error}");
    assert_eq!(body["running_version"], json!(1));
    let after = running(&mut client).await;
    assert_eq!(after, before, "the running configuration is unchanged");
    for (body, status) in [("not: [valid", 422), ("\u{0}\u{1}", 422)] {
        let answer = admin(&mut client, "POST", None, Some(body)).await;
        expect_status(&answer, status);
    }
    // Without a --config file an empty body has nothing to read.
    let answer = admin(&mut client, "POST", None, Some("")).await;
    expect_status(&answer, 400);
    assert!(
        answer.text().contains("without --config"),
        "{}",
        answer.text()
    );
    assert_eq!(
        metric(
            &mut client,
            "kv_router_config_reloads_rejected_total{trigger=\"http\"}"
        )
        .await,
        Some(4.0)
    );
    assert_eq!(
        metric(
            &mut client,
            "kv_router_config_reloads_total{trigger=\"http\"}"
        )
        .await,
        Some(0.0)
    );
    assert_eq!(
        metric(&mut client, "kv_router_config_version").await,
        Some(1.0)
    );
}

#[tokio::test]
async fn a_posted_configuration_swaps_in_and_shows() {
    let service = AdminService::start(KVCR_YAML, None, true).await;
    let mut client = service.client().await;
    register_workers(&mut client, [1, 2]).await;
    let answer = admin(&mut client, "POST", None, Some(DEFAULT_YAML)).await;
    expect_status(&answer, 200);
    assert_eq!(answer.json()["version"], json!(2));
    let shown = running(&mut client).await;
    assert_eq!(shown["version"], json!(2));
    assert_eq!(shown["source"], json!("POST /admin/config"));
    assert_eq!(shown["text"], json!(DEFAULT_YAML));
    assert_eq!(
        shown["roles"],
        json!({"aggregated": {"selection": "dynamo-default-cost-fn", "hints": []}})
    );
    // The partition made before the reload books with the new policies.
    let partitions = service.service.partitions();
    assert_eq!(partitions.len(), 1);
    let setup = partitions[0].router.setup();
    assert_eq!(
        setup
            .roles
            .values()
            .next()
            .map(|role| role.selection_type.as_str()),
        Some("dynamo-default-cost-fn")
    );
    assert_eq!(partitions[0].router.policy_version(), 2);
    let booked = client
        .post_json("/select_and_reserve", &booking("r1", &tokens(64, 1)))
        .await
        .expect("book");
    expect_status(&booked, 200);
    release(&mut client, "r1").await;
    assert_eq!(
        metric(&mut client, "kv_router_config_version").await,
        Some(2.0)
    );
}

#[tokio::test]
async fn an_empty_post_reads_the_file_again() {
    let dir = std::env::temp_dir().join(format!("kv-router-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("router.yaml");
    std::fs::write(&path, KVCR_YAML).expect("write the config");
    let service = AdminService::start(KVCR_YAML, Some(path.clone()), true).await;
    let mut client = service.client().await;

    std::fs::write(&path, DEFAULT_YAML).expect("rewrite the config");
    let answer = admin(&mut client, "POST", None, None).await;
    expect_status(&answer, 200);
    let shown = running(&mut client).await;
    assert_eq!(shown["version"], json!(2));
    assert_eq!(shown["source"], json!(path.display().to_string()));

    std::fs::write(
        &path,
        "router_mode: kv\nblock_size: 16\nworker_selection:\n  aggregated: no-such-policy\n",
    )
    .expect("break the config");
    let answer = admin(&mut client, "POST", None, None).await;
    expect_status(&answer, 422);
    let error = answer.json()["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        error.contains(&format!("{}:4:", path.display())) && error.contains("no-such-policy"),
        "{error}"
    );
    assert_eq!(running(&mut client).await["version"], json!(2));

    std::fs::remove_file(&path).expect("remove the config");
    let answer = admin(&mut client, "POST", None, None).await;
    expect_status(&answer, 422);
    assert_eq!(running(&mut client).await["version"], json!(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn dropping_a_role_that_workers_serve_is_refused() {
    let service = AdminService::start(KVCR_YAML, None, true).await;
    let mut client = service.client().await;
    register_workers(&mut client, [1, 2]).await;
    let decode_only =
        "router_mode: kv\nblock_size: 16\nworker_selection:\n  decode: dynamo-default-cost-fn\n";
    let answer = admin(&mut client, "POST", None, Some(decode_only)).await;
    expect_status(&answer, 409);
    let error = answer.json()["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        error.contains("role `aggregated`") && error.contains("worker ids: 1, 2"),
        "{error}"
    );
    assert_eq!(running(&mut client).await["version"], json!(1));
    assert_eq!(service.service.partitions()[0].router.policy_version(), 1);
}

#[tokio::test]
async fn a_role_added_by_a_reload_admits_the_workers_waiting_for_it() {
    let service = AdminService::start(KVCR_YAML, None, true).await;
    let mut client = service.client().await;
    let mut prefill = worker_body(5);
    prefill["role"] = json!("prefill");
    let created = client
        .post_json("/workers", &prefill)
        .await
        .expect("register");
    expect_status(&created, 201);
    assert_eq!(created.json()["lifecycle"], json!("incomplete"));
    let both = format!("{KVCR_YAML}  prefill: dynamo-default-cost-fn\n");
    expect_status(&admin(&mut client, "POST", None, Some(&both)).await, 200);
    let workers = client.get("/workers").await.expect("workers").json();
    assert_eq!(workers[0]["worker_id"], json!(5));
    assert_eq!(workers[0]["lifecycle"], json!("schedulable"), "{workers}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hundred_reloads_under_concurrent_bookings_lose_no_booking() {
    const CLIENTS: usize = 3;
    const RELOADS: u64 = 100;
    let service = AdminService::start(KVCR_YAML, None, true).await;
    let mut client = service.client().await;
    register_workers(&mut client, [1, 2, 3, 4]).await;
    let stop = Arc::new(AtomicBool::new(false));
    let booked = Arc::new(AtomicU64::new(0));
    let mut bookers = Vec::new();
    for task in 0..CLIENTS {
        let mut client = service.client().await;
        let (stop, booked) = (Arc::clone(&stop), Arc::clone(&booked));
        bookers.push(tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) || n < 20 {
                let id = format!("c{task}-{n}");
                let answer = client
                    .post_json("/select_and_reserve", &booking(&id, &tokens(96, n % 5)))
                    .await
                    .expect("book");
                expect_status(&answer, 200);
                release(&mut client, &id).await;
                booked.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
        }));
    }
    for version in 2..=RELOADS + 1 {
        let yaml = if version % 2 == 0 {
            DEFAULT_YAML
        } else {
            KVCR_YAML
        };
        let answer = admin(&mut client, "POST", None, Some(yaml)).await;
        expect_status(&answer, 200);
        assert_eq!(answer.json()["version"], json!(version));
    }
    stop.store(true, Ordering::Relaxed);
    for booker in bookers {
        booker.await.expect("a booking client failed");
    }
    assert_all_loads_zero(&mut client).await;
    let bookings = booked.load(Ordering::Relaxed) as f64;
    assert!(bookings >= (CLIENTS * 20) as f64);
    assert_eq!(
        metric(&mut client, "kv_router_bookings_total{").await,
        Some(bookings),
        "every booking counted once"
    );
    assert_eq!(
        metric(
            &mut client,
            "kv_router_config_reloads_total{trigger=\"http\"}"
        )
        .await,
        Some(RELOADS as f64)
    );
    assert_eq!(
        service.service.partitions()[0].router.policy_version(),
        RELOADS + 1
    );
}
