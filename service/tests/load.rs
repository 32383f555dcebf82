//! Many concurrent clients for a bounded number of requests: every booking succeeds, every
//! release answers 200, and bookings and releases balance exactly (`/loads` back to zero).

mod common;

use common::*;
use serde_json::json;

const CLIENTS: usize = 32;
const BOOKINGS_PER_CLIENT: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_bookings_and_releases_balance() {
    let service = start(DEFAULT_YAML).await;
    let mut admin = service.client().await;
    register_workers(&mut admin, 1..=4).await;
    let mut clients = Vec::new();
    for client_index in 0..CLIENTS {
        let mut client = service.client().await;
        clients.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            for booking in 0..BOOKINGS_PER_CLIENT {
                let id = format!("c{client_index}-{booking}");
                let prompt = tokens(64 + booking * 16, client_index as u32);
                let booked = client
                    .post_json(
                        "/select_and_reserve",
                        &json!({"model_name": "m", "selection_id": id, "token_ids": prompt}),
                    )
                    .await
                    .expect("book");
                statuses.push(booked.status);
                let done = client
                    .post(&format!("/reservations/{id}/prefill_complete"), b"")
                    .await
                    .expect("prefill complete");
                statuses.push(done.status);
                let freed = client
                    .delete(&format!("/reservations/{id}"))
                    .await
                    .expect("free");
                statuses.push(freed.status);
            }
            statuses
        }));
    }
    let mut answers = 0;
    for client in clients {
        let statuses = client.await.expect("client task");
        assert!(statuses.iter().all(|status| *status == 200), "{statuses:?}");
        answers += statuses.len();
    }
    assert_eq!(answers, CLIENTS * BOOKINGS_PER_CLIENT * 3);

    assert_all_loads_zero(&mut admin).await;
    let metrics = admin.get("/metrics").await.expect("metrics").text();
    let bookings = format!(
        "kv_router_bookings_total{{model_name=\"m\",routing_group=\"default\"}} {}",
        CLIENTS * BOOKINGS_PER_CLIENT
    );
    assert!(metrics.lines().any(|line| line == bookings), "{metrics}");
}
