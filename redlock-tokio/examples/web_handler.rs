//! A request handler guarding a resource: `POST /invoices/{id}/pay` takes the invoice's lock
//! for the length of the payment; a second request for the same invoice meanwhile gets
//! `409 Conflict` instead of paying twice.
//!
//! `cargo run -p redlock-tokio --example web_handler` (it serves on 127.0.0.1, sends itself two
//! concurrent requests and prints the answers; nodes from `REDLOCK_NODES`, or three local
//! redis-servers started for the run).

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use redlock_tokio::{Error, Redlock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn pay(State(redlock): State<Redlock>, Path(id): Path<u64>) -> (StatusCode, String) {
    let lock = match redlock
        .try_lock(format!("invoice:{id}"), Duration::from_secs(10))
        .await
    {
        Ok(lock) => lock,
        Err(Error::Contended(_)) => {
            return (
                StatusCode::CONFLICT,
                format!("invoice {id} is being paid\n"),
            );
        }
        Err(err) => return (StatusCode::SERVICE_UNAVAILABLE, format!("{err}\n")),
    };
    // The payment: must not run twice at once for one invoice, and must end in the validity.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ok = lock.remaining() > Duration::ZERO;
    lock.release().await;
    if ok {
        (StatusCode::OK, format!("invoice {id} paid\n"))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "took too long; not committed\n".to_owned(),
        )
    }
}

/// A minimal HTTP/1.1 client: the status line of `POST path`.
async fn post_status(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response.lines().next().unwrap_or_default().to_owned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = redlock_local::Nodes::from_env_or_start(3)?;
    let redlock = Redlock::new(nodes.urls())?;
    let app = Router::new()
        .route("/invoices/{id}/pay", post(pay))
        .with_state(redlock);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });

    let (first, second) = tokio::join!(post_status(addr, "/invoices/42/pay"), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        post_status(addr, "/invoices/42/pay").await
    });
    let (first, second) = (first?, second?);
    println!("first request:  {first}");
    println!("second request: {second}");
    assert!(
        first.contains("200") && second.contains("409"),
        "{first} / {second}"
    );
    let third = post_status(addr, "/invoices/42/pay").await?;
    println!("after the first finished: {third}");
    assert!(third.contains("200"));
    Ok(())
}
