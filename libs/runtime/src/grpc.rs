//! The gRPC services every toolgate server exposes: health and reflection.

use tonic_health::server::HealthReporter;

/// The health service and its reporter.
pub fn health() -> (
    HealthReporter,
    tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
) {
    let (reporter, service) = tonic_health::server::health_reporter();
    (reporter, service)
}

/// Server reflection (v1 and v1alpha) over toolgate's descriptor set and the health protocol.
pub fn reflection() -> (
    tonic_reflection::server::v1::ServerReflectionServer<
        impl tonic_reflection::server::v1::ServerReflection,
    >,
    tonic_reflection::server::v1alpha::ServerReflectionServer<
        impl tonic_reflection::server::v1alpha::ServerReflection,
    >,
) {
    let v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(toolgate_contracts::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .expect("embedded descriptor sets are valid");
    let v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(toolgate_contracts::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .expect("embedded descriptor sets are valid");
    (v1, v1alpha)
}
