"""A small SMF built on Debian's scapy (scapy.contrib.pfcp): tests/pfcp_e2e.rs runs it in the
cluster's control namespace against one node's PFCP address.

    pfcp_smf.py UPF_IP SRC_IP SEQ_BASE OP [JOB.json]

OP is one of: setup (Association Setup, then Heartbeat), heartbeat, establish, modify, add_chv4 (a
modification adding a CHV4 downlink PDR), delete (the sessions in JOB.json), bad (the requests that must be refused). It prints one JSON object on
stdout with what the UPF answered. Requests go out in a window of 32, each retransmitted after
a second (3 times at most), with sequence numbers from SEQ_BASE (a later run must not reuse an
earlier run's numbers: the UPF answers those from its cache)."""
import json
import os
import socket
import sys
import time

from scapy.contrib.pfcp import *  # noqa: F401,F403

UPF, SRC, SEQ = sys.argv[1], sys.argv[2], int(sys.argv[3])
OP = sys.argv[4]
JOB = json.load(open(sys.argv[5])) if len(sys.argv) > 5 else []
# The SMF's Recovery Time Stamp (SMF_TS in the environment: pfcp_replay.py's vectors give
# 3976214400, so that both scripts are one SMF to the UPF).
SMF_TS = int(os.environ.get("SMF_TS", "3950000000"))

sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind((SRC, 0))
sock.settimeout(0.05)


def node_id():
    return IE_NodeId(id_type="IPv4", ipv4=SRC)


def msg(seq, body, seid=None):
    if seid is None:
        return PFCP(version=1, S=0, seq=seq) / body
    return PFCP(version=1, S=1, seid=seid, seq=seq) / body


def find(ies, cls):
    """The IEs of class cls among ies and their grouped children, in order."""
    out = []
    for ie in ies or []:
        if isinstance(ie, cls):
            out.append(ie)
        out.extend(find(getattr(ie, "IE_list", None), cls))
    return out


def exchange(reqs, limit=60.0):
    """Sends [(seq, bytes)] in a window of 32; returns {seq: parsed response}."""
    got, sent, tries = {}, {}, {}
    todo = list(reqs)
    t0 = time.time()
    while (todo or sent) and time.time() - t0 < limit:
        while todo and len(sent) < 32:
            seq, b = todo.pop(0)
            sock.sendto(b, (UPF, 8805))
            sent[seq] = (time.time(), b)
            tries[seq] = 1
        try:
            data, src = sock.recvfrom(65535)
            if src[0] != UPF:
                sys.exit("a response came from %s, not from %s, the address asked" % (src[0], UPF))
            p = PFCP(data)
            if p.seq in sent:
                del sent[p.seq]
                got[p.seq] = p
        except socket.timeout:
            pass
        now = time.time()
        for seq, (at, b) in list(sent.items()):
            if now - at > 1.0:
                if tries[seq] >= 4:
                    del sent[seq]
                    continue
                sock.sendto(b, (UPF, 8805))
                sent[seq] = (now, b)
                tries[seq] += 1
    return got


def node_name(n):
    if n.id_type == 2:
        return n.id.decode() if isinstance(n.id, bytes) else str(n.id)
    return n.ipv4


def summary(p):
    """Cause, SEID of the header, F-SEID, Created PDRs' F-TEIDs, Offending IE and the number of
    Usage Reports (of a deletion) of a response."""
    if p is None:
        return None
    ies = p.payload.IE_list
    cause = find(ies, IE_Cause)
    fseid = find(ies, IE_FSEID)
    off = find(ies, IE_OffendingIE)
    usage = find(ies, IE_UsageReport_SDR)
    return {
        "type": p.message_type,
        "seid": p.seid if p.S else None,
        "cause": cause[0].cause if cause else None,
        "up_seid": fseid[0].seid if fseid else None,
        "up_seid_ipv4": fseid[0].ipv4 if fseid else None,
        "fteids": [{"teid": f.TEID, "ipv4": f.ipv4} for f in find(ies, IE_FTEID)],
        "ue_ipv4": [u.ipv4 for u in find(ies, IE_UE_IP_Address) if u.V4],
        "offending_ie": off[0].type if off else None,
        "recovery": [r.timestamp for r in find(ies, IE_RecoveryTimeStamp)],
        "node_id": [node_name(n) for n in find(ies, IE_NodeId)],
        "usage_reports": len(usage),
    }


def ue_ip_address(ue):
    """The UE IP Address IE of a Core PDR (destination): the address, or "chv4" for CHV4 (the
    UPF picks one; this scapy has no CHV4 field: flags V4|S/D|CHV4 and no address)."""
    if ue == "chv4":
        return IE_NotImplemented(ietype=93, data=b"\x16")
    if ":" in ue:
        return IE_UE_IP_Address(V6=1, SD=1, ipv6=ue)
    return IE_UE_IP_Address(V4=1, SD=1, ipv4=ue)


def establishment(seq, s, with_fseid=True):
    """With "urr" in the job's session: a volume-measuring URR (1) on both PDRs, as every real
    SMF sends (the Usage Report of its deletion is counted in the summary)."""
    urr = [IE_URR_Id(id=1)] if s.get("urr") else []
    ies = [node_id()]
    if with_fseid:
        ies.append(IE_FSEID(v4=1, seid=s["cp_seid"], ipv4=SRC))
    ies += [
        IE_CreatePDR(IE_list=[
            IE_PDR_Id(id=1),
            IE_Precedence(precedence=200),
            IE_PDI(IE_list=[
                IE_SourceInterface(interface="Core"),
                ue_ip_address(s["ue"]),
            ]),
            IE_FAR_Id(id=1),
        ] + urr),
        IE_CreatePDR(IE_list=[
            IE_PDR_Id(id=2),
            IE_Precedence(precedence=100),
            IE_PDI(IE_list=[
                IE_SourceInterface(interface="Access"),
                IE_FTEID(CH=1, V4=1),
            ]),
            IE_OuterHeaderRemoval(header="GTP-U/UDP/IPv4"),
            IE_FAR_Id(id=2),
        ] + urr),
        IE_CreateFAR(IE_list=[
            IE_FAR_Id(id=1),
            IE_ApplyAction(FORW=1),
            IE_ForwardingParameters(IE_list=[
                IE_DestinationInterface(interface="Access"),
                IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=s["teid"], ipv4=s["enb"]),
            ]),
        ]),
        IE_CreateFAR(IE_list=[
            IE_FAR_Id(id=2),
            IE_ApplyAction(FORW=1),
            IE_ForwardingParameters(IE_list=[IE_DestinationInterface(interface="Core")]),
        ]),
    ]
    if urr:
        ies.append(IE_CreateURR(IE_list=[
            IE_URR_Id(id=1),
            IE_MeasurementMethod(VOLUM=1),
            IE_ReportingTriggers(),
        ]))
    return bytes(msg(seq, PFCPSessionEstablishmentRequest(IE_list=ies), seid=0))


def modification(seq, s):
    return bytes(msg(seq, PFCPSessionModificationRequest(IE_list=[
        IE_UpdateFAR(IE_list=[
            IE_FAR_Id(id=1),
            IE_ApplyAction(FORW=1),
            IE_UpdateForwardingParameters(IE_list=[
                IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=s["teid"], ipv4=s["enb"]),
            ]),
        ]),
    ]), seid=s["up_seid"]))


def add_chv4(seq, s):
    """A Session Modification creating a downlink PDR (3) whose UE IP Address asks CHV4: the
    UPF picks the session's IPv4 address (it had none) and answers it in the Created PDR."""
    return bytes(msg(seq, PFCPSessionModificationRequest(IE_list=[
        IE_CreatePDR(IE_list=[
            IE_PDR_Id(id=3),
            IE_Precedence(precedence=150),
            IE_PDI(IE_list=[
                IE_SourceInterface(interface="Core"),
                ue_ip_address("chv4"),
            ]),
            IE_FAR_Id(id=1),
        ]),
    ]), seid=s["up_seid"]))


def deletion(seq, s):
    return bytes(msg(seq, PFCPSessionDeletionRequest(), seid=s["up_seid"]))


def run_jobs(build):
    reqs = [(SEQ + i, build(SEQ + i, s)) for i, s in enumerate(JOB)]
    got = exchange(reqs)
    return [summary(got.get(seq)) for seq, _ in reqs]


if OP == "setup":
    got = exchange([(SEQ, bytes(msg(SEQ, PFCPAssociationSetupRequest(IE_list=[
        node_id(),
        IE_RecoveryTimeStamp(timestamp=SMF_TS),
    ]))))])
    hb = exchange([(SEQ + 1, bytes(msg(SEQ + 1, PFCPHeartbeatRequest(IE_list=[
        IE_RecoveryTimeStamp(timestamp=SMF_TS),
    ]))))])
    out = {"setup": summary(got.get(SEQ)), "heartbeat": summary(hb.get(SEQ + 1))}
elif OP == "heartbeat":
    hb = exchange([(SEQ, bytes(msg(SEQ, PFCPHeartbeatRequest(IE_list=[
        IE_RecoveryTimeStamp(timestamp=SMF_TS),
    ]))))])
    out = {"heartbeat": summary(hb.get(SEQ))}
elif OP == "establish":
    out = {"results": run_jobs(establishment)}
elif OP == "modify":
    out = {"results": run_jobs(modification)}
elif OP == "add_chv4":
    out = {"results": run_jobs(add_chv4)}
elif OP == "delete":
    out = {"results": run_jobs(deletion)}
elif OP == "bad":
    s = JOB[0]
    missing = exchange([(SEQ, establishment(SEQ, s, with_fseid=False))], 5)
    unknown = exchange([(SEQ + 1, modification(SEQ + 1, dict(s, up_seid=0x7777_0000_0001)))], 5)
    out = {
        "missing_fseid": summary(missing.get(SEQ)),
        "unknown_seid": summary(unknown.get(SEQ + 1)),
    }
elif OP == "unassociated":
    got = exchange([(SEQ, establishment(SEQ, JOB[0]))], 5)
    out = {"establish": summary(got.get(SEQ))}
else:
    sys.exit("unknown op " + OP)
json.dump(out, sys.stdout)
