//! The executor's domain errors as statuses: the one place they become `tonic::Status`,
//! through the workspace's central mapping (`toolgate_contracts::status`).

use tonic::Status;
use toolgate_contracts::status;

use crate::authz::HiddenUnknown;
use crate::confined;

impl From<confined::Error> for Status {
    fn from(e: confined::Error) -> Status {
        status::from_error(&e)
    }
}

impl From<HiddenUnknown> for Status {
    fn from(e: HiddenUnknown) -> Status {
        status::from_error(&e)
    }
}
