//! Buffering action rules (TS 29.244 5.2.4, 7.5.2.6, 7.5.4.11-12): a session's one BAR, kept
//! with its rules. What buffering does: a downlink FAR that says BUFF sets
//! [`UePolicy::buffer`] (the handling node buffers), BUFF with NOCP [`UePolicy::notify`] (the
//! node reports the first buffered packet, [`Upf::downlink_data`], and we send one Downlink
//! Data Report per buffering episode, after the BAR's Downlink Data Notification Delay); an
//! Update FAR to FORW ends the episode (the node delivers the buffer in order).

use super::*;

/// Create BAR of an establishment.
pub(super) fn create(bar: &mut Option<Bar>, create: Option<Bar>) -> Result<(), Reject> {
    *bar = create;
    Ok(())
}

/// Create, Update and Remove BAR of a modification: a session holds one BAR; an update or
/// removal must name it, a creation must not replace another.
pub(super) fn edit(
    bar: &mut Option<Bar>,
    create: Option<Bar>,
    update: Option<Bar>,
    remove: Option<BarId>,
) -> Result<(), Reject> {
    // A BAR id is refused as the offending IE (Failed Rule ID names no BAR before Release
    // 16's BAR type, which SMFs do not read).
    let fail = Reject::ie(Cause::RULE_CREATION_MODIFICATION_FAILURE, ie_type::BAR_ID);
    if let Some(id) = remove {
        if bar.map(|b| b.bar_id) != Some(id) {
            return Err(fail);
        }
        *bar = None;
    }
    if let Some(c) = create {
        if bar.is_some_and(|b| b.bar_id != c.bar_id) {
            return Err(fail);
        }
        *bar = Some(c);
    }
    if let Some(u) = update {
        let b = bar.as_mut().filter(|b| b.bar_id == u.bar_id).ok_or(fail)?;
        if u.dl_data_notification_delay.is_some() {
            b.dl_data_notification_delay = u.dl_data_notification_delay;
        }
        if u.suggested_buffering_packets_count.is_some() {
            b.suggested_buffering_packets_count = u.suggested_buffering_packets_count;
        }
    }
    Ok(())
}
