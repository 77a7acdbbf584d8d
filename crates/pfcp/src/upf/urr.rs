//! Usage reporting rules (TS 29.244 5.2.2, 7.5.2.4, 7.5.4.4): a session's URRs as created,
//! updated and removed. A PDR must name existing URRs ([`super::pdr`] checks that).

use super::*;

/// Create URR: each id once.
pub(super) fn create(urrs: &mut VecMap<u32, Urr>, create: Vec<Urr>) -> Result<(), Reject> {
    for u in create {
        urr_config(&u)?;
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
        urr_config(old)?;
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

/// What we apply of a URR: its measurement method, the reporting triggers we honour and
/// their thresholds, quotas and period, read from its IEs through the checked codec.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct UrrConfig {
    /// VOLUM: volumes are measured and reported.
    pub(super) volume: bool,
    /// DURAT: time is measured and reported.
    pub(super) duration: bool,
    /// The triggers we honour, as [`UsageReportTrigger`] bits (PERIO, VOLTH, TIMTH, VOLQU,
    /// TIMQU); the others are accepted and not acted on.
    pub(super) triggers: u32,
    pub(super) volume_threshold: Option<Volume>,
    pub(super) volume_quota: Option<Volume>,
    /// Seconds.
    pub(super) time_threshold: Option<u32>,
    pub(super) time_quota: Option<u32>,
    pub(super) period: Option<u32>,
}

/// The URR's [`UrrConfig`]; a threshold, quota or period IE that does not read refuses the
/// URR by its id.
pub(super) fn urr_config(u: &Urr) -> Result<UrrConfig, Reject> {
    let fail = Reject::rule(FailedRuleId::Urr(u.urr_id.0));
    let mut c = UrrConfig::default();
    if let Some(MeasurementMethod(m)) = u.measurement_method {
        c.volume = m & MeasurementMethod::VOLUM != 0;
        c.duration = m & MeasurementMethod::DURAT != 0;
    }
    if let Some(rt) = &u.reporting_triggers {
        for (bit, t) in [
            (ReportingTriggers::PERIO, UsageReportTrigger::PERIO),
            (ReportingTriggers::VOLTH, UsageReportTrigger::VOLTH),
            (ReportingTriggers::TIMTH, UsageReportTrigger::TIMTH),
            (ReportingTriggers::VOLQU, UsageReportTrigger::VOLQU),
            (ReportingTriggers::TIMQU, UsageReportTrigger::TIMQU),
        ] {
            if rt.has(bit) {
                c.triggers |= t;
            }
        }
    }
    for ie in &u.other {
        let v = &ie.value[..];
        match ie.ie_type {
            ie_type::VOLUME_THRESHOLD => {
                c.volume_threshold = Some(read::<VolumeThreshold>(v).map_err(|_| fail)?.0)
            }
            ie_type::VOLUME_QUOTA => {
                c.volume_quota = Some(read::<VolumeQuota>(v).map_err(|_| fail)?.0)
            }
            ie_type::TIME_THRESHOLD => {
                c.time_threshold = Some(read::<TimeThreshold>(v).map_err(|_| fail)?.0)
            }
            ie_type::TIME_QUOTA => c.time_quota = Some(read::<TimeQuota>(v).map_err(|_| fail)?.0),
            ie_type::MEASUREMENT_PERIOD => {
                let p = read::<MeasurementPeriod>(v).map_err(|_| fail)?.0;
                // A period of 0 s would report without end.
                c.period = (p != 0).then_some(p);
            }
            _ => {}
        }
    }
    Ok(c)
}

/// Whether a quota's or threshold's volume is reached.
fn reached(u: &Usage, v: &Volume) -> bool {
    let total = u.ul_bytes.saturating_add(u.dl_bytes);
    v.total.is_some_and(|t| total >= t)
        || v.ul.is_some_and(|t| u.ul_bytes >= t)
        || v.dl.is_some_and(|t| u.dl_bytes >= t)
}

/// One URR's measurement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Meter {
    pub(super) config: UrrConfig,
    /// The directions of the PDRs that name it (uplink: Access PDRs, downlink: Core PDRs).
    pub(super) ul: bool,
    pub(super) dl: bool,
    /// The next report's UR-SEQN.
    pub(super) seqn: u32,
    /// Counted since the last report, and when that measurement began.
    pub(super) since: Usage,
    pub(super) start: Duration,
    /// Counted since the quota was given, and when.
    pub(super) quota_used: Usage,
    pub(super) quota_start: Duration,
    /// When the next periodic report is due.
    pub(super) next_period: Option<Duration>,
    /// Its quota is used up: its PDRs forward nothing until a new quota.
    pub(super) exhausted: bool,
}

impl Meter {
    fn new(config: UrrConfig, now: Duration) -> Self {
        Meter {
            config,
            ul: false,
            dl: false,
            seqn: 0,
            since: Usage::default(),
            start: now,
            quota_used: Usage::default(),
            quota_start: now,
            next_period: config.period.map(|p| now + Duration::from_secs(p.into())),
            exhausted: false,
        }
    }

    fn add(&mut self, d: &Usage) {
        let d = Usage {
            ul_bytes: if self.ul { d.ul_bytes } else { 0 },
            ul_packets: if self.ul { d.ul_packets } else { 0 },
            dl_bytes: if self.dl { d.dl_bytes } else { 0 },
            dl_packets: if self.dl { d.dl_packets } else { 0 },
        };
        self.since = self.since.plus(&d);
        self.quota_used = self.quota_used.plus(&d);
    }

    /// The triggers that fire at `now` ([`UsageReportTrigger`] bits, 0 for none); a quota
    /// used up marks the meter exhausted (whether or not its trigger asks for a report).
    fn fire(&mut self, now: Duration) -> u32 {
        let c = self.config;
        let secs = |from: Duration| now.saturating_sub(from).as_secs();
        let mut t = 0;
        if c.triggers & UsageReportTrigger::VOLTH != 0
            && c.volume_threshold.is_some_and(|v| reached(&self.since, &v))
        {
            t |= UsageReportTrigger::VOLTH;
        }
        if c.triggers & UsageReportTrigger::TIMTH != 0
            && c.time_threshold
                .is_some_and(|s| secs(self.start) >= u64::from(s))
        {
            t |= UsageReportTrigger::TIMTH;
        }
        if !self.exhausted {
            if c.volume_quota
                .is_some_and(|v| reached(&self.quota_used, &v))
            {
                self.exhausted = true;
                t |= c.triggers & UsageReportTrigger::VOLQU;
            }
            if c.time_quota
                .is_some_and(|s| secs(self.quota_start) >= u64::from(s))
            {
                self.exhausted = true;
                t |= c.triggers & UsageReportTrigger::TIMQU;
            }
        }
        if let (Some(p), Some(next)) = (c.period, self.next_period) {
            if now >= next {
                let p = Duration::from_secs(p.into());
                let mut n = next;
                while n <= now {
                    n += p;
                }
                self.next_period = Some(n);
                t |= c.triggers & UsageReportTrigger::PERIO;
            }
        }
        t
    }

    /// When [`Meter::fire`] may next fire by time alone.
    fn due(&self) -> Option<Duration> {
        let c = self.config;
        let s = |x: u32| Duration::from_secs(x.into());
        [
            c.time_threshold
                .filter(|_| c.triggers & UsageReportTrigger::TIMTH != 0)
                .map(|t| self.start + s(t)),
            c.time_quota
                .filter(|_| !self.exhausted)
                .map(|t| self.quota_start + s(t)),
            self.next_period,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The usage report of what was measured since the last one (then measuring starts
    /// again); `ntp0` is the NTP time of `now` zero.
    fn report(&mut self, id: u32, trigger: u32, now: Duration, ntp0: u32) -> UsageReport {
        let ntp = |d: Duration| ntp0.wrapping_add(d.as_secs() as u32);
        let u = self.since;
        let volume = self.config.volume.then_some(VolumeMeasurement {
            total: Some(u.ul_bytes.saturating_add(u.dl_bytes)),
            ul: Some(u.ul_bytes),
            dl: Some(u.dl_bytes),
            total_packets: Some(u.ul_packets.saturating_add(u.dl_packets)),
            ul_packets: Some(u.ul_packets),
            dl_packets: Some(u.dl_packets),
        });
        let secs = now.saturating_sub(self.start).as_secs();
        let duration = (self.config.duration)
            .then_some(DurationMeasurement(u32::try_from(secs).unwrap_or(u32::MAX)));
        let r = UsageReport {
            urr_id: UrrId(id),
            ur_seqn: UrSeqn(self.seqn),
            trigger: UsageReportTrigger(trigger),
            start_time: Some(StartTime(ntp(self.start))),
            end_time: Some(EndTime(ntp(now))),
            volume_measurement: volume,
            duration_measurement: duration,
        };
        self.seqn = self.seqn.wrapping_add(1);
        self.since = Usage::default();
        self.start = now;
        r
    }
}

/// When a Downlink Data Report is due for a session whose downlink is buffered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Ddr {
    /// None sent in this buffering episode.
    #[default]
    Idle,
    /// At this time (the BAR's Downlink Data Notification Delay after the first packet).
    Due(Duration),
    /// Sent: not again until a FAR changes.
    Sent,
}

/// A session's usage state: its URRs' meters and the last counts its handling node gave per
/// uplink TEID. Kept for sessions with URRs or a BUFF|NOCP FAR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Metering {
    /// Where Session Report Requests go (the CP F-SEID's address, port 8805) and their SEID.
    pub(super) smf: SocketAddr,
    pub(super) cp_seid: u64,
    /// The session's uplink TEIDs (the handling node's slots).
    pub(super) teids: Few<u32>,
    /// The last cumulative counts of each (one inline: a session has one uplink TEID as a
    /// rule).
    pub(super) last: SmallVec<[(u32, Usage); 1]>,
    pub(super) meters: VecMap<u32, Meter>,
    /// The exhausted URRs whose stop the installed forwarding holds.
    pub(super) applied_stopped: Few<u32>,
    pub(super) ddr: Ddr,
    /// The BAR's Downlink Data Notification Delay.
    pub(super) ddr_delay: Duration,
    /// The downlink PDRs whose FAR is BUFF|NOCP (the Downlink Data Report names them).
    pub(super) ddr_pdrs: Few<u16>,
    /// When [`Upf::poll`] next looks at it (its key in the timers).
    pub(super) due: Option<Duration>,
}

impl Metering {
    /// The bytes it takes on the heap (its own allocation, [`Upf`]'s map holds it boxed, and
    /// its meters' and counts'), as malloc sizes them.
    pub(super) fn heap(&self) -> usize {
        let spilled = if self.last.spilled() {
            malloc_chunk(self.last.capacity() * std::mem::size_of::<(u32, Usage)>())
        } else {
            0
        };
        malloc_chunk(std::mem::size_of::<Metering>())
            + malloc_chunk(self.meters.capacity() * std::mem::size_of::<(u32, Meter)>())
            + spilled
    }

    /// The URRs whose quota is used up.
    pub(super) fn stopped(&self) -> Few<u32> {
        (self.meters.iter())
            .filter(|(_, m)| m.exhausted)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Takes the cumulative counts `usage` of slot `teid`.
    pub(super) fn feed(&mut self, teid: u32, usage: Usage) {
        let last = match self.last.iter_mut().find(|(t, _)| *t == teid) {
            Some((_, l)) => l,
            None => {
                self.last.push((teid, Usage::default()));
                &mut self.last.last_mut().expect("just pushed").1
            }
        };
        let d = usage.since(last);
        *last = usage;
        for m in self.meters.values_mut() {
            m.add(&d);
        }
    }

    /// The usage reports due at `now`.
    pub(super) fn fire(&mut self, now: Duration, ntp0: u32) -> Vec<UsageReport> {
        let mut out = Vec::new();
        for (id, m) in self.meters.iter_mut() {
            let t = m.fire(now);
            if t != 0 {
                out.push(m.report(*id, t, now, ntp0));
            }
        }
        out
    }

    /// Every URR's report with `trigger` (a query, the session's end), or those of `ids`.
    pub(super) fn report_all(
        &mut self,
        ids: Option<&[u32]>,
        trigger: u32,
        now: Duration,
        ntp0: u32,
    ) -> Vec<UsageReport> {
        (self.meters.iter_mut())
            .filter(|(id, _)| ids.is_none_or(|ids| ids.contains(id)))
            .map(|(id, m)| m.report(*id, trigger, now, ntp0))
            .collect()
    }

    /// When [`Upf::poll`] should next look at it.
    pub(super) fn next_due(&self) -> Option<Duration> {
        let ddr = match self.ddr {
            Ddr::Due(t) => Some(t),
            _ => None,
        };
        self.meters.values().filter_map(Meter::due).chain(ddr).min()
    }
}

/// What a change of rules does to the usage state: URRs given a new quota, the URRs to
/// report now (Query URR, or all of them: QAURR), whether a FAR changed (a new buffering
/// episode).
#[derive(Clone, Debug, Default)]
pub(super) struct MeterEdit {
    pub(super) regranted: Vec<u32>,
    pub(super) query: Vec<u32>,
    pub(super) query_all: bool,
    pub(super) far_changed: bool,
}

/// Query URR: each must exist.
pub(super) fn exist(urrs: &VecMap<u32, Urr>, ids: &[UrrId]) -> Result<(), Reject> {
    match ids.iter().find(|id| !urrs.contains_key(&id.0)) {
        Some(id) => Err(Reject::rule(FailedRuleId::Urr(id.0))),
        None => Ok(()),
    }
}

/// The usage state of a session with `rules` (none when it has no URR and no BUFF|NOCP
/// FAR), carried on from `old`: meters of kept URRs keep counting (with their new settings;
/// a new quota starts afresh), new URRs start at `now`. Also the meters of URRs the rules no
/// longer hold (to report, TERMR).
pub(super) fn metering(
    rules: &Rules,
    smf: SocketAddr,
    cp_seid: u64,
    old: Option<&Metering>,
    edit: &MeterEdit,
    now: Duration,
) -> (Option<Metering>, VecMap<u32, Meter>) {
    let mut removed = VecMap::new();
    if let Some(o) = old {
        for (id, m) in o.meters.iter() {
            if !rules.urrs.contains_key(id) {
                removed.insert(*id, m.clone());
            }
        }
    }
    let nocp = |f: &CreateFar| f.apply_action.has(ApplyAction::NOCP);
    let ddr_pdrs: Few<u16> = (rules.pdrs.iter())
        .filter(|(_, (p, _))| p.pdi.source_interface == Interface::CORE)
        .filter(|(_, (p, _))| {
            (p.far_id.and_then(|f| rules.fars.get(&f.0))).is_some_and(|f| {
                f.apply_action.has(ApplyAction::BUFF) && f.apply_action.has(ApplyAction::NOCP)
            })
        })
        .map(|(id, _)| *id)
        .collect();
    if rules.urrs.is_empty() && !rules.fars.values().any(nocp) {
        return (None, removed);
    }
    let mut meters = VecMap::new();
    for (id, u) in rules.urrs.iter() {
        // Checked when the URR was created or updated.
        let config = urr_config(u).unwrap_or_default();
        let mut m = match old.and_then(|o| o.meters.get(id)) {
            Some(m) => {
                let mut m = m.clone();
                if m.config.period != config.period {
                    m.next_period = config.period.map(|p| now + Duration::from_secs(p.into()));
                }
                m.config = config;
                if edit.regranted.contains(id) {
                    m.quota_used = Usage::default();
                    m.quota_start = now;
                    m.exhausted = false;
                }
                m
            }
            None => Meter::new(config, now),
        };
        (m.ul, m.dl) = (false, false);
        for (p, _) in rules.pdrs.values() {
            if p.urr_ids.iter().any(|x| x.0 == *id) {
                match p.pdi.source_interface {
                    Interface::ACCESS => m.ul = true,
                    Interface::CORE => m.dl = true,
                    _ => {}
                }
            }
        }
        meters.insert(*id, m);
    }
    // A Vec's first push makes room for four.
    meters.shrink_to_fit();
    let ddr_delay = (rules.bar)
        .and_then(|b| b.dl_data_notification_delay)
        .map_or(Duration::ZERO, |d| {
            Duration::from_millis(50 * u64::from(d.0))
        });
    let m = Metering {
        smf,
        cp_seid,
        teids: teids_of(rules),
        last: old.map(|o| o.last.clone()).unwrap_or_default(),
        meters,
        applied_stopped: old.map(|o| o.applied_stopped.clone()).unwrap_or_default(),
        ddr: match old {
            Some(o) if !edit.far_changed => o.ddr,
            _ => Ddr::Idle,
        },
        ddr_delay,
        ddr_pdrs,
        due: old.and_then(|o| o.due),
    };
    (Some(m), removed)
}
