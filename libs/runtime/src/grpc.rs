//! The gRPC services every toolgate server exposes (health and reflection) and the tuned
//! HTTP/2 transport every toolgate server and client uses.
//!
//! The transport settings below were measured with `tests/bench` (`--bin grpc`); the numbers
//! behind each choice are in the doc comment of the constant.

mod conn;

pub use conn::{COMBINE_LIMIT, Conn};
use tokio::net::TcpListener;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Endpoint, Server};
use tonic_health::server::HealthReporter;

/// HTTP/2 per-stream receive window (both sides), instead of hyper's 1 MiB (server) / 2 MiB
/// (client): room for sixteen 256 KiB output chunks in flight, so the executor never waits for
/// a WINDOW_UPDATE while the client decodes. Measured with `--bin grpc stream` on 2 cores, it
/// neither helped nor hurt next to the frame size (8 MiB windows: 0.56× raw pipe, 4 MiB: 0.57-
/// 0.64×); it is kept because it bounds what one stream may buffer at a few chunks.
pub const STREAM_WINDOW: u32 = 4 << 20;

/// HTTP/2 per-connection receive window (both sides): room for two full streams, so one
/// busy stream does not starve the unary calls multiplexed on the same connection.
pub const CONNECTION_WINDOW: u32 = 2 * STREAM_WINDOW;

/// Largest HTTP/2 frame either side accepts, instead of the 16 KiB protocol default. This is
/// the setting that matters for streamed output: the executor forwards up to 256 KiB per
/// chunk, and with 16 KiB or 64 KiB frames the client received 0.42-0.44× the raw pipe
/// throughput, with frames of a whole chunk 0.57-0.64× (same run, 2 busy cores). It is the
/// *client's* value that governs server-to-client streaming. Unary messages are far smaller
/// than one frame, so their latency is unchanged.
pub const MAX_FRAME: u32 = 256 << 10;

// RFC 9113: SETTINGS_MAX_FRAME_SIZE lies in 2^14..2^24, a window is below 2^31.
const _: () = assert!(MAX_FRAME >= 1 << 14 && MAX_FRAME < 1 << 24);
const _: () = assert!(STREAM_WINDOW <= CONNECTION_WINDOW && CONNECTION_WINDOW < 1 << 31);

/// The server builder every toolgate service starts from.
///
/// - Fixed windows ([`STREAM_WINDOW`], [`CONNECTION_WINDOW`]), not the adaptive (BDP-probing)
///   window: it measured no better (0.58× raw pipe vs 0.57-0.64× fixed), its probe pings add
///   frames, and a fixed window bounds how much a peer can make us buffer.
/// - [`MAX_FRAME`] as the largest frame the server accepts.
/// - `TCP_NODELAY` (only applies to `serve(addr)`; with a listener use [`incoming`]).
pub fn server() -> Server {
    Server::builder()
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .http2_adaptive_window(Some(false))
        .max_frame_size(MAX_FRAME)
        .tcp_nodelay(true)
}

/// The connections a server accepts on `listener`, with `TCP_NODELAY` (without it a small
/// unary answer can wait out the peer's delayed ACK, ~40 ms on Linux), each wrapped in a
/// [`Conn`] so that a small answer leaves in one write.
pub fn incoming(
    listener: TcpListener,
) -> impl Stream<Item = std::io::Result<Conn>> + Send + 'static {
    TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .map(|accepted| accepted.map(Conn::new))
}

/// The client endpoint every toolgate client (the executor calling the policy service, the
/// CLI, the benchmarks) starts from, with the same windows and frame size as [`server`]. For
/// server-to-client streaming (run output) it is the client's receive window and maximum
/// frame size that bound throughput.
pub fn endpoint(uri: impl Into<String>) -> Result<Endpoint, tonic::transport::Error> {
    Ok(Endpoint::from_shared(uri.into())?
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .http2_adaptive_window(false)
        .max_frame_size(MAX_FRAME)
        .tcp_nodelay(true))
}

/// The health service and its reporter.
pub fn health() -> (
    HealthReporter,
    tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
) {
    let (reporter, service) = tonic_health::server::health_reporter();
    (reporter, service)
}

/// The services every toolgate port serves besides its own: health and reflection.
pub const COMMON_SERVICES: [&str; 3] = [
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// Server reflection (v1 and v1alpha) over toolgate's descriptor set and the health protocol,
/// listing exactly `services` (the port's own, fully qualified) plus [`COMMON_SERVICES`]: a
/// port that answers `UNIMPLEMENTED` for a service does not advertise it.
pub fn reflection(
    services: &[&str],
) -> (
    tonic_reflection::server::v1::ServerReflectionServer<
        impl tonic_reflection::server::v1::ServerReflection,
    >,
    tonic_reflection::server::v1alpha::ServerReflectionServer<
        impl tonic_reflection::server::v1alpha::ServerReflection,
    >,
) {
    let builder = || {
        services.iter().chain(COMMON_SERVICES.iter()).fold(
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(toolgate_contracts::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET),
            |b, name| b.with_service_name(*name),
        )
    };
    let v1 = builder()
        .build_v1()
        .expect("embedded descriptor sets are valid");
    let v1alpha = builder()
        .build_v1alpha()
        .expect("embedded descriptor sets are valid");
    (v1, v1alpha)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    /// The tuned settings are ones hyper and h2 accept: a server built by [`server`] and a
    /// client built by [`endpoint`] complete a call over real loopback TCP.
    #[tokio::test]
    async fn tuned_server_and_endpoint_complete_a_call() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (_reporter, service) = health();
        let served = tokio::spawn(
            server()
                .add_service(service)
                .serve_with_incoming(incoming(listener)),
        );
        let channel = endpoint(format!("http://{addr}"))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        let answer = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .expect("check")
            .into_inner();
        assert_eq!(answer.status, ServingStatus::Serving as i32);
        served.abort();
    }
}
