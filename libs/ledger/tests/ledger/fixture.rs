//! `testing::FreshPg`, the fresh-database fixture every crate's tests and the benchmarks use.

use sqlx::Connection;
use toolgate_ledger::testing::{FreshPg, admin_url};

async fn exists(name: &str) -> bool {
    let mut admin = sqlx::PgConnection::connect(&admin_url()).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    n == 1
}

#[tokio::test]
async fn each_fresh_database_is_its_own_and_is_gone_once_dropped() {
    let a = FreshPg::create("tg_fixture_test");
    let b = FreshPg::create("tg_fixture_test");
    assert_ne!(a.name(), b.name());
    assert!(a.name().starts_with("tg_fixture_test_"), "{}", a.name());

    let mut open = sqlx::PgConnection::connect(a.url()).await.unwrap();
    let current: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&mut open)
        .await
        .unwrap();
    assert_eq!(current, a.name());

    // A connection still open does not keep it alive.
    let name = a.name().to_owned();
    drop(a);
    assert!(!exists(&name).await, "{name} survived its fixture");
    assert!(exists(b.name()).await);
    let b_name = b.name().to_owned();
    drop(b);
    assert!(!exists(&b_name).await);
    drop(open);
}

#[test]
fn a_failing_test_still_drops_its_database() {
    let name = std::thread::spawn(|| {
        let db = FreshPg::create("tg_fixture_test");
        let name = db.name().to_owned();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _db = db;
            panic!("the test body fails");
        }));
        assert!(r.is_err());
        name
    })
    .join()
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    assert!(!rt.block_on(exists(&name)), "{name} survived a panic");
}
