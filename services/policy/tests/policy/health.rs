//! The health endpoint follows the database: NOT_SERVING while Postgres is down, SERVING
//! again once it returns, without a restart. Runs on a private Postgres cluster.

use crate::support;

use support::*;
use tokio_stream::StreamExt;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use toolgate_contracts::policy::v1 as pb;
use toolgate_ledger::testing::PrivatePg;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_not_serving_while_the_database_is_down() {
    let pg = tokio::task::block_in_place(PrivatePg::start);
    let server = Server::start(
        &pg.url(),
        &Options {
            retry_ms: 200,
            ..Options::default()
        },
    );
    let mut health = HealthClient::new(server.channel().await);
    let mut watch = health
        .watch(tonic_health::pb::HealthCheckRequest {
            service: "toolgate.policy.v1.ApprovalService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut next = async || {
        tokio::time::timeout(SOON, watch.next())
            .await
            .expect("a health change in time")
            .unwrap()
            .unwrap()
            .status
    };
    assert_eq!(next().await, ServingStatus::Serving as i32);
    let mut exec = server.policy(EXEC).await;
    let call = |id: &str| authorize(id, "s", "agent-1", run(&["echo", "hi"]));
    exec.authorize(call("h-1")).await.unwrap();

    tokio::task::block_in_place(|| pg.stop_immediate());
    assert_eq!(next().await, ServingStatus::NotServing as i32);
    let e = exec.authorize(call("h-2")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert_eq!(reason(&e), "LEDGER_UNAVAILABLE");
    assert_eq!(
        e.message().matches("unavailable").count(),
        1,
        "said once: {}",
        e.message()
    );

    tokio::task::block_in_place(|| pg.start_server());
    assert_eq!(next().await, ServingStatus::Serving as i32);
    let r = exec.authorize(call("h-3")).await.unwrap().into_inner();
    assert!(matches!(
        r.result,
        Some(pb::authorize_response::Result::Allowed(_))
    ));
}
