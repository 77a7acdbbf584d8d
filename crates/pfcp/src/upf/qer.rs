//! QoS enforcement rules (TS 29.244 5.4, 7.5.2.5, 7.5.4.5): which QERs we accept, and a
//! session's QERs as created, updated and removed. What they do to forwarding (gates) is
//! [`super::pdr::forwarding`]'s.

use super::*;

/// A QER we accept: gates (applied), MBR and GBR (kept, not yet enforced), a QFI of 6 bits
/// (kept). Any other QER IE (Packet Rate, DL Flow Level Marking, ...) is refused by the QER's
/// id.
pub(super) fn check_qer(q: &Qer) -> Result<(), Reject> {
    let gates_ok = q.gate_status.is_none_or(|g| g.ul <= 1 && g.dl <= 1);
    let qfi_ok = q.qfi.is_none_or(|Qfi(f)| f <= 63);
    if !gates_ok || !qfi_ok || !q.other.is_empty() {
        return Err(Reject::rule(FailedRuleId::Qer(q.qer_id.0)));
    }
    Ok(())
}

/// Create QER: each accepted ([`check_qer`]) and its id once.
pub(super) fn create(qers: &mut VecMap<u32, Qer>, create: Vec<Qer>) -> Result<(), Reject> {
    for q in create {
        check_qer(&q)?;
        let id = q.qer_id.0;
        if qers.insert(id, q).is_some() {
            return Err(Reject::rule(FailedRuleId::Qer(id)));
        }
    }
    Ok(())
}

/// Remove QER: each must exist.
pub(super) fn remove(qers: &mut VecMap<u32, Qer>, ids: &[QerId]) -> Result<(), Reject> {
    for id in ids {
        qers.remove(&id.0)
            .ok_or(Reject::rule(FailedRuleId::Qer(id.0)))?;
    }
    Ok(())
}

/// Update QER: each must exist; the update replaces the QER, but for a gate status it leaves
/// out; the result must be accepted.
pub(super) fn update(qers: &mut VecMap<u32, Qer>, updates: Vec<Qer>) -> Result<(), Reject> {
    for u in updates {
        let id = u.qer_id.0;
        let q = qers
            .get_mut(&id)
            .ok_or(Reject::rule(FailedRuleId::Qer(id)))?;
        let gate = u.gate_status.or(q.gate_status);
        *q = Qer {
            gate_status: gate,
            ..u
        };
        check_qer(q)?;
    }
    Ok(())
}
