//! Refusals: a cause with the Offending IE or the Failed Rule ID, and the response of each
//! request type that carries it.

use super::*;

/// A refusal: the cause and what it is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Reject {
    pub(super) cause: Cause,
    pub(super) offending_ie: Option<u16>,
    pub(super) failed_rule: Option<FailedRuleId>,
}

impl Reject {
    pub(super) fn cause(cause: Cause) -> Self {
        Reject {
            cause,
            offending_ie: None,
            failed_rule: None,
        }
    }
    pub(super) fn rule(rule: FailedRuleId) -> Self {
        Reject {
            cause: Cause::RULE_CREATION_MODIFICATION_FAILURE,
            offending_ie: None,
            failed_rule: Some(rule),
        }
    }
    pub(super) fn ie(cause: Cause, ie: u16) -> Self {
        Reject {
            cause,
            offending_ie: Some(ie),
            failed_rule: None,
        }
    }
}

impl<S: Sessions> Upf<S> {
    /// The rejection response to a request of type `t`.
    pub(super) fn reject(
        &self,
        t: u8,
        reply_seid: Option<u64>,
        sequence: u32,
        r: Reject,
    ) -> Message {
        let node_id = self.our_node();
        let offending_ie = r.offending_ie.map(OffendingIe);
        let body = match t {
            msg_type::ASSOCIATION_SETUP_REQUEST => {
                Body::AssociationSetupResponse(AssociationSetupResponse {
                    node_id,
                    cause: r.cause,
                    recovery_time_stamp: self.config.recovery_time_stamp,
                    up_function_features: None,
                    cp_function_features: None,
                })
            }
            msg_type::ASSOCIATION_UPDATE_REQUEST => {
                Body::AssociationUpdateResponse(AssociationUpdateResponse {
                    node_id,
                    cause: r.cause,
                    up_function_features: None,
                    cp_function_features: None,
                })
            }
            msg_type::ASSOCIATION_RELEASE_REQUEST => {
                Body::AssociationReleaseResponse(AssociationReleaseResponse {
                    node_id,
                    cause: r.cause,
                })
            }
            msg_type::SESSION_ESTABLISHMENT_REQUEST => {
                Body::SessionEstablishmentResponse(SessionEstablishmentResponse {
                    node_id,
                    cause: r.cause,
                    offending_ie,
                    up_f_seid: None,
                    created_pdr: vec![],
                    failed_rule_id: r.failed_rule,
                })
            }
            msg_type::SESSION_MODIFICATION_REQUEST => {
                Body::SessionModificationResponse(SessionModificationResponse {
                    cause: r.cause,
                    offending_ie,
                    created_pdr: vec![],
                    failed_rule_id: r.failed_rule,
                    usage_report: vec![],
                })
            }
            _ => Body::SessionDeletionResponse(SessionDeletionResponse {
                cause: r.cause,
                offending_ie,
                usage_report: vec![],
            }),
        };
        Message {
            seid: reply_seid,
            sequence,
            priority: None,
            body,
        }
    }
}
