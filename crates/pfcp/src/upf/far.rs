//! Forwarding action rules (TS 29.244 5.2.1, 7.5.2.3, 7.5.4.3): what a FAR's Apply Action
//! does here, and a session's FARs as created, updated and removed.

use super::*;

/// What a FAR does.
pub(super) enum Action {
    Forward,
    Drop,
}

/// The FAR's action: exactly one of DROP, FORW, BUFF (with or without NOCP); DUPL or any
/// other flag refuses the FAR. BUFF drops (no buffering yet).
pub(super) fn far_action(f: &CreateFar) -> Result<Action, Reject> {
    let a = f.apply_action;
    let fail = Reject::rule(FailedRuleId::Far(f.far_id.0));
    let main = a.0 & (ApplyAction::DROP | ApplyAction::FORW | ApplyAction::BUFF);
    if a.has(ApplyAction::DUPL)
        || a.0 & !(ApplyAction::DROP | ApplyAction::FORW | ApplyAction::BUFF | ApplyAction::NOCP)
            != 0
    {
        return Err(fail);
    }
    match main {
        ApplyAction::FORW => Ok(Action::Forward),
        ApplyAction::DROP | ApplyAction::BUFF => Ok(Action::Drop),
        _ => Err(fail),
    }
}

/// Create FAR: each id once (the action is checked with the PDRs, [`super::pdr::forwarding`]).
pub(super) fn create(
    fars: &mut VecMap<u32, CreateFar>,
    create: Vec<CreateFar>,
) -> Result<(), Reject> {
    for f in create {
        let id = f.far_id.0;
        if fars.insert(id, f).is_some() {
            return Err(Reject::rule(FailedRuleId::Far(id)));
        }
    }
    Ok(())
}

/// Remove FAR: each must exist.
pub(super) fn remove(fars: &mut VecMap<u32, CreateFar>, ids: &[FarId]) -> Result<(), Reject> {
    for id in ids {
        fars.remove(&id.0)
            .ok_or(Reject::rule(FailedRuleId::Far(id.0)))?;
    }
    Ok(())
}

/// Update FAR: each must exist; its Apply Action replaces the FAR's, and each field of its
/// Update Forwarding Parameters replaces that of the FAR's Forwarding Parameters (made when
/// the FAR had none).
pub(super) fn update(
    fars: &mut VecMap<u32, CreateFar>,
    updates: Vec<UpdateFar>,
) -> Result<(), Reject> {
    for u in updates {
        let id = u.far_id.0;
        let f = fars
            .get_mut(&id)
            .ok_or(Reject::rule(FailedRuleId::Far(id)))?;
        if let Some(a) = u.apply_action {
            f.apply_action = a;
        }
        if let Some(up) = u.update_forwarding_parameters {
            let p = f.forwarding_parameters.get_or_insert(ForwardingParameters {
                destination_interface: None,
                network_instance: None,
                outer_header_creation: None,
            });
            if up.destination_interface.is_some() {
                p.destination_interface = up.destination_interface;
            }
            if up.network_instance.is_some() {
                p.network_instance = up.network_instance;
            }
            if up.outer_header_creation.is_some() {
                p.outer_header_creation = up.outer_header_creation;
            }
        }
    }
    Ok(())
}
