//! Telemetry plumbing shared by the agent and the leader: the HTTP endpoints that expose
//! their metrics and health. (Instruments live with the code they measure.)

pub mod http;
