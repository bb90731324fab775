//! The job queue: the job model (`model`), and the one API through which jobs are claimed,
//! kept leased, finished, handed back and expired (`JobQueue`), and handed from ingest to
//! this process's workers as they are created (`Handoff`). The statements behind it are the
//! store's; `worker/` and `ingest/` use the queue through this module only.

mod handoff;
mod jobs;
mod model;

pub use handoff::{HandedOff, Handoff, Reservation};
pub use jobs::{lease_span, JobQueue};
pub use model::{JobStatus, NextStep, RetryPolicy, Verdict};
