//! PFCP (3GPP TS 29.244, the N4/Sxb protocol) for the cluster as one user-plane function: a
//! checked codec of the messages a control plane (SMF, SGW-C/PGW-C) sends a UPF, and the
//! sans-IO endpoint that turns them into forwarding-table changes.

pub mod fuzzing;
pub mod ie;
pub mod message;

pub use ie::*;
pub use message::*;
pub mod upf;

pub use upf::{
    Applied, Config, Failure, FibChange, Forwarding, Placement, Sessions, Stats, Token, Transmit,
    Upf,
};
