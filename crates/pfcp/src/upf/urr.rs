//! Usage reporting rules (TS 29.244 5.2.2, 7.5.2.4, 7.5.4.4): a session's URRs as created,
//! updated and removed. A PDR must name existing URRs ([`super::pdr`] checks that).

use super::*;

/// Create URR: each id once.
pub(super) fn create(urrs: &mut VecMap<u32, Urr>, create: Vec<Urr>) -> Result<(), Reject> {
    for u in create {
        let id = u.urr_id.0;
        if urrs.insert(id, u).is_some() {
            return Err(Reject::rule(FailedRuleId::Urr(id)));
        }
    }
    Ok(())
}

/// Remove URR: each must exist.
pub(super) fn remove(urrs: &mut VecMap<u32, Urr>, ids: &[UrrId]) -> Result<(), Reject> {
    for id in ids {
        urrs.remove(&id.0)
            .ok_or(Reject::rule(FailedRuleId::Urr(id.0)))?;
    }
    Ok(())
}

/// Update URR: each must exist ([`update_urr`]).
pub(super) fn update(urrs: &mut VecMap<u32, Urr>, updates: Vec<Urr>) -> Result<(), Reject> {
    for u in updates {
        let id = u.urr_id.0;
        let old = urrs
            .get_mut(&id)
            .ok_or(Reject::rule(FailedRuleId::Urr(id)))?;
        update_urr(old, u);
    }
    Ok(())
}

/// An Update URR's fields replace the URR's (its other IEs replace those of the same type).
pub(super) fn update_urr(old: &mut Urr, new: Urr) {
    if new.measurement_method.is_some() {
        old.measurement_method = new.measurement_method;
    }
    if new.reporting_triggers.is_some() {
        old.reporting_triggers = new.reporting_triggers;
    }
    for ie in new.other {
        old.other.retain(|o| o.ie_type != ie.ie_type);
        old.other.push(ie);
    }
}
