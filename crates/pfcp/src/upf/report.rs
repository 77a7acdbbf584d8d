//! Reports to the control plane (TS 29.244 5.2.2 usage reporting, 7.5.8 Session Report
//! Request): the handling nodes' counts come in ([`Upf::usage`], [`Upf::complete_usage`]),
//! the URRs' thresholds, quotas and periods fire ([`Upf::poll`] for those that time fires),
//! and Session Report Requests go out with Usage Reports (USAR) or a Downlink Data Report
//! (DLDR, [`Upf::downlink_data`]), retransmitted every [`Config::report_t1`] up to
//! [`Config::report_n1`] times until the Session Report Response comes. A quota used up
//! closes the gates of its URR's PDRs ([`UePolicy::dl_gate_closed`], through
//! [`Sessions::apply`]) until the SMF gives a new one. The Usage Reports of a Session Deletion
//! Response (TERMR) and of a Query URR in a Session Modification Response (IMMER) wait for the
//! handling node's final counts ([`Sessions::read_usage`]), read after the change was applied.

use super::*;

/// A Session Report Request of ours, kept until answered or given up.
#[derive(Clone, Debug)]
pub(super) struct OutReport {
    pub(super) to: SocketAddr,
    pub(super) bytes: Vec<u8>,
    /// When to send it again.
    pub(super) next: Duration,
    /// Times sent.
    pub(super) tries: u8,
}

/// A response waiting for the handling node's counts.
#[derive(Debug)]
pub(super) struct Read {
    pub(super) deadline: Duration,
    pub(super) to: SocketAddr,
    pub(super) sequence: u32,
    pub(super) digest: u64,
    pub(super) reply_seid: Option<u64>,
    pub(super) kind: ReadKind,
}

#[derive(Debug)]
pub(super) enum ReadKind {
    /// A deletion: the session's usage state, detached.
    Delete(Box<Metering>),
    /// A modification: its Created PDRs, the URRs queried (all: `None`) and the meters of
    /// the URRs it removed (with the session's last counts).
    Modify {
        seid: u64,
        created: Vec<CreatedPdr>,
        query: Option<Vec<u32>>,
        removed: Box<Metering>,
    },
}

/// Where a session's Session Report Requests go: its CP F-SEID's address, PFCP's port.
pub(super) fn report_addr(f: &FSeid) -> SocketAddr {
    let ip = match (f.ipv4, f.ipv6) {
        (Some(a), _) => IpAddr::V4(a),
        (None, Some(a)) => IpAddr::V6(a),
        (None, None) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, PORT)
}

impl<S: Sessions> Upf<S> {
    /// The cumulative counts `usage` of the handling node's slot `ul_teid` (since its entry was
    /// installed; a count below the last one given means the entry was installed anew) at
    /// `now`: the Session Report Requests the URRs of its session fire (a threshold or quota
    /// crossed). A TEID no metered session holds is counted ([`Stats::usage_unknown`]) and
    /// ignored. Feed every slot of [`Upf::metered_teids`] every second or so.
    pub fn usage(&mut self, now: Duration, ul_teid: u32, usage: Usage) -> Vec<Transmit> {
        self.now = now;
        let mut out = Vec::new();
        let Some(&seid) = self.by_teid.get(&ul_teid) else {
            self.stats.usage_unknown += 1;
            return out;
        };
        if let Some(m) = self.metering.get_mut(&seid) {
            m.feed(ul_teid, usage);
        }
        self.meter(seid, now, &mut out);
        out
    }

    /// The handling node buffered the first downlink packet of the session of `ul_teid` (its
    /// FAR says BUFF|NOCP, [`UePolicy::notify`]): one Session Report Request with a Downlink
    /// Data Report per buffering episode (none again until a FAR of the session changes),
    /// after the BAR's Downlink Data Notification Delay ([`Upf::poll`] sends it then).
    pub fn downlink_data(&mut self, now: Duration, ul_teid: u32) -> Vec<Transmit> {
        self.now = now;
        let mut out = Vec::new();
        let Some(&seid) = self.by_teid.get(&ul_teid) else {
            self.stats.usage_unknown += 1;
            return out;
        };
        let Some(m) = self.metering.get_mut(&seid) else {
            return out;
        };
        if m.ddr != Ddr::Idle || m.ddr_pdrs.is_empty() {
            return out;
        }
        m.ddr = Ddr::Due(now + m.ddr_delay);
        self.meter(seid, now, &mut out);
        out
    }

    /// The uplink TEIDs whose counts the endpoint wants ([`Upf::usage`]) or whose first
    /// buffered packet it wants to hear of ([`Upf::downlink_data`]).
    pub fn metered_teids(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_teid.keys().copied()
    }

    /// Gives the counts [`Sessions::read_usage`] left pending (`token`): the response that
    /// waited for them. An unknown token (answered already, on its timeout) gives nothing.
    pub fn complete_usage(
        &mut self,
        now: Duration,
        token: Token,
        counts: &[(u32, Usage)],
    ) -> Vec<Transmit> {
        self.now = now;
        self.cache.expire(now);
        let mut out = Vec::new();
        if let Some(r) = self.reads.remove(&token) {
            self.answer_read(r, counts, &mut out);
        }
        out
    }

    /// The URRs of session `seid` whose stop its installed forwarding holds.
    pub(super) fn stopped_of(&self, seid: u64) -> Few<u32> {
        (self.metering.get(&seid)).map_or_else(Few::new, |m| m.applied_stopped.clone())
    }

    /// Keeps `m` as session `seid`'s usage state (or drops it), with its TEIDs' index and
    /// timer.
    pub(super) fn set_metering(&mut self, seid: u64, m: Option<Metering>) {
        if let Some(old) = self.metering.remove(&seid) {
            self.meter_heap -= old.heap();
            for t in &old.teids {
                if self.by_teid.get(t) == Some(&seid) {
                    self.by_teid.remove(t);
                }
            }
            if let Some(d) = old.due {
                self.timers.remove(&(d, seid));
            }
        }
        if let Some(mut m) = m {
            for t in &m.teids {
                self.by_teid.insert(*t, seid);
            }
            m.due = m.next_due();
            if let Some(d) = m.due {
                self.timers.insert((d, seid));
            }
            self.meter_heap += m.heap();
            self.metering.insert(seid, Box::new(m));
        }
    }

    /// Fires what is due of session `seid` at `now`: usage reports, a Downlink Data Report,
    /// the stop of a quota used up; then schedules its next look.
    fn meter(&mut self, seid: u64, now: Duration, out: &mut Vec<Transmit>) {
        let ntp0 = self.config.ntp_at_zero;
        let Some(m) = self.metering.get_mut(&seid) else {
            return;
        };
        let usage = m.fire(now, ntp0);
        let ddr = match m.ddr {
            Ddr::Due(t) if t <= now => {
                m.ddr = Ddr::Sent;
                Some(DownlinkDataReport {
                    pdr_id: m.ddr_pdrs.iter().map(|&p| PdrId(p)).collect(),
                })
            }
            _ => None,
        };
        let (to, cp_seid) = (m.smf, m.cp_seid);
        let due = m.next_due();
        if m.due != due {
            if let Some(d) = m.due {
                self.timers.remove(&(d, seid));
            }
            m.due = due;
            if let Some(d) = due {
                self.timers.insert((d, seid));
            }
        }
        if let Some(d) = ddr {
            self.stats.downlink_data_reports += 1;
            let req = SessionReportRequest {
                report_type: ReportType(ReportType::DLDR),
                downlink_data_report: Some(d),
                usage_report: vec![],
            };
            self.send_report(out, now, to, cp_seid, req);
        }
        if !usage.is_empty() {
            self.stats.usage_reports += usage.len() as u64;
            let req = SessionReportRequest {
                report_type: ReportType(ReportType::USAR),
                downlink_data_report: None,
                usage_report: usage,
            };
            self.send_report(out, now, to, cp_seid, req);
        }
        self.enforce(seid);
    }

    /// Sends a Session Report Request and keeps it for retransmission.
    fn send_report(
        &mut self,
        out: &mut Vec<Transmit>,
        now: Duration,
        to: SocketAddr,
        cp_seid: u64,
        req: SessionReportRequest,
    ) {
        let seq = self.next_seq;
        self.next_seq = self.next_seq % 0xff_ffff + 1;
        let msg = Message {
            seid: Some(cp_seid),
            sequence: seq,
            priority: None,
            body: Body::SessionReportRequest(req),
        };
        // Our own values fit their fields.
        let Ok(bytes) = msg.to_bytes() else {
            return;
        };
        self.stats.reports_sent += 1;
        *(self.stats.tx)
            .entry((msg_type::SESSION_REPORT_REQUEST, 0))
            .or_default() += 1;
        self.reports.insert(
            seq,
            OutReport {
                to,
                bytes: bytes.clone(),
                next: now + self.config.report_t1,
                tries: 1,
            },
        );
        out.push(Transmit { to, bytes });
    }

    /// A Session Report Response from `from` to our request `seq`.
    pub(super) fn report_answered(&mut self, from: SocketAddr, seq: u32, body: &[u8]) {
        let Ok(Body::SessionReportResponse(r)) =
            Body::decode(msg_type::SESSION_REPORT_RESPONSE, body)
        else {
            self.stats.malformed += 1;
            return;
        };
        match self.reports.get(&seq) {
            Some(o) if o.to.ip() == from.ip() => {
                self.reports.remove(&seq);
                if r.cause == Cause::REQUEST_ACCEPTED {
                    self.stats.reports_accepted += 1;
                } else {
                    self.stats.reports_refused += 1;
                }
            }
            _ => self.stats.ignored += 1,
        }
    }

    /// What [`Upf::poll`] does for reports at `now`: URR timers and Downlink Data Reports that
    /// are due, retransmissions, and responses whose counts did not come in time.
    pub(super) fn reports_due(&mut self, now: Duration, out: &mut Vec<Transmit>) {
        while let Some(&(t, seid)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            if let Some(m) = self.metering.get_mut(&seid) {
                m.due = None;
            }
            self.meter(seid, now, out);
        }
        let (t1, n1) = (self.config.report_t1, self.config.report_n1);
        let mut gone = Vec::new();
        for (seq, o) in self.reports.iter_mut() {
            if now < o.next {
                continue;
            }
            if o.tries >= n1 {
                gone.push(*seq);
                continue;
            }
            o.tries += 1;
            o.next = now + t1;
            self.stats.report_retransmissions += 1;
            out.push(Transmit {
                to: o.to,
                bytes: o.bytes.clone(),
            });
        }
        for seq in gone {
            self.reports.remove(&seq);
            self.stats.reports_unanswered += 1;
        }
        let late: Vec<Token> = (self.reads.iter())
            .filter(|(_, r)| r.deadline <= now)
            .map(|(t, _)| *t)
            .collect();
        for t in late {
            if let Some(r) = self.reads.remove(&t) {
                self.stats.usage_read_timeouts += 1;
                self.answer_read(r, &[], out);
            }
        }
    }

    /// Closes (or opens again) the gates of session `seid`'s PDRs whose URR's quota is used up
    /// (or given anew), through the cluster, unless a change of it is being installed (the
    /// change's end looks again).
    pub(super) fn enforce(&mut self, seid: u64) {
        let Some(m) = self.metering.get(&seid) else {
            return;
        };
        let want = m.stopped();
        if want == m.applied_stopped || self.busy.contains(&seid) {
            return;
        }
        let Some(kept) = self.sessions.get(seid) else {
            return;
        };
        let to = m.smf;
        let (placement, packed) = Stored { kept }.packed(&self.shapes);
        let old = Stored::session(placement, &packed, &m.applied_stopped);
        let new = Stored::session(placement, &packed, &want);
        let changes = old.fwd.changes(&new.fwd, placement.node);
        let token = Token(self.next_token);
        self.next_token += 1;
        let result = if changes.0.is_empty() && changes.1.is_empty() {
            Ok(Applied::Done)
        } else {
            self.sessions_impl.apply(token, &changes.0, &changes.1)
        };
        match result {
            Ok(Applied::Done) => {
                if let Some(m) = self.metering.get_mut(&seid) {
                    m.applied_stopped = want;
                }
            }
            Ok(Applied::Pending) => {
                self.busy.insert(seid);
                let commit = Commit::Enforce {
                    seid,
                    stopped: want,
                };
                let p = Pending {
                    to,
                    sequence: 0,
                    digest: 0,
                    reply_seid: None,
                    request: 0,
                    commit,
                };
                self.pending.insert(token, p);
            }
            Err(_) => self.stats.quota_stops_failed += 1,
        }
    }

    /// Asks the cluster for the counts of `teids`, then answers `read` (now, or when they
    /// come: [`Upf::complete_usage`], or on [`Config::usage_read_timeout`]).
    pub(super) fn read_then(&mut self, read: Read, teids: &[u32]) -> Option<Message> {
        let token = Token(self.next_token);
        self.next_token += 1;
        match self.sessions_impl.read_usage(token, teids) {
            UsageRead::Now(counts) => Some(self.read_answer(read, &counts)),
            UsageRead::Pending => {
                self.in_flight.insert((read.to, read.sequence, read.digest));
                self.reads.insert(token, read);
                None
            }
        }
    }

    /// Sends the answer of `read` with `counts`.
    fn answer_read(&mut self, read: Read, counts: &[(u32, Usage)], out: &mut Vec<Transmit>) {
        self.in_flight
            .remove(&(read.to, read.sequence, read.digest));
        let (to, cache) = (read.to, (read.sequence, read.digest));
        let msg = self.read_answer(read, counts);
        self.send(out, self.now, to, Some(cache), msg);
    }

    /// The response `read` waited for, with the usage `counts` tell.
    fn read_answer(&mut self, read: Read, counts: &[(u32, Usage)]) -> Message {
        let (now, ntp0) = (self.now, self.config.ntp_at_zero);
        let body = match read.kind {
            ReadKind::Delete(mut m) => {
                for (t, u) in counts {
                    m.feed(*t, *u);
                }
                let usage_report = m.report_all(None, UsageReportTrigger::TERMR, now, ntp0);
                Body::SessionDeletionResponse(SessionDeletionResponse {
                    cause: Cause::REQUEST_ACCEPTED,
                    offending_ie: None,
                    usage_report,
                })
            }
            ReadKind::Modify {
                seid,
                created,
                query,
                mut removed,
            } => {
                let mut usage_report = Vec::new();
                if let Some(m) = self.metering.get_mut(&seid) {
                    for (t, u) in counts {
                        m.feed(*t, *u);
                    }
                    let trigger = UsageReportTrigger::IMMER;
                    usage_report = m.report_all(query.as_deref(), trigger, now, ntp0);
                }
                for (t, u) in counts {
                    removed.feed(*t, *u);
                }
                let trigger = UsageReportTrigger::TERMR;
                usage_report.extend(removed.report_all(None, trigger, now, ntp0));
                Body::SessionModificationResponse(SessionModificationResponse {
                    cause: Cause::REQUEST_ACCEPTED,
                    offending_ie: None,
                    created_pdr: created,
                    failed_rule_id: None,
                    usage_report,
                })
            }
        };
        Message {
            seid: read.reply_seid,
            sequence: read.sequence,
            priority: None,
            body,
        }
    }
}
