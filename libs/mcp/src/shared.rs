//! What every session of one server shares: the executor's channel, the configuration and
//! the tool definitions.

use std::sync::Arc;
use std::time::Duration;

use toolgate_contracts::executor::v1::filesystem_service_client::FilesystemServiceClient;
use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;

use crate::tasks::TaskStore;
use crate::tools::{self, Definition};

/// How the server reaches the executor and how it treats calls.
#[derive(Debug, Clone)]
pub struct McpConfig {
    /// How long a call the policy asks about waits for a human before it returns "pending"
    /// (zero: return at once). The executor clamps it to its own maximum.
    pub approval_wait: Duration,
    /// Whether runs reach the network under the executor's default sandbox profile, which
    /// makes `run_command` open-world.
    pub network: bool,
    /// Where task records live; with it the server offers the tasks extension to clients
    /// that declare it (an `ask` becomes a task whose id is the approval id).
    pub tasks: Option<Arc<TaskStore>>,
    /// The executor's address as the user gave it, for messages that name it.
    pub executor: String,
}

/// What every session of one server shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) channel: tonic::transport::Channel,
    pub(crate) config: McpConfig,
    /// The tools, in `tools/list` order.
    pub(crate) tools: Vec<Definition>,
}

impl Shared {
    pub(crate) fn new(channel: tonic::transport::Channel, config: McpConfig) -> Self {
        Shared {
            tools: tools::definitions(config.network),
            channel,
            config,
        }
    }

    pub(crate) fn fs(&self) -> FilesystemServiceClient<tonic::transport::Channel> {
        FilesystemServiceClient::new(self.channel.clone())
    }

    pub(crate) fn process(&self) -> ProcessServiceClient<tonic::transport::Channel> {
        ProcessServiceClient::new(self.channel.clone())
    }
}
