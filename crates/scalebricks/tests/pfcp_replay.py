"""Replays a stock SMF's PFCP messages (crates/pfcp/tests/data/smf/SMF/NN-*.bin, written IE
for IE as open5gs or free5GC builds them) to one node: tests/pfcp_e2e.rs runs it in the
cluster's control namespace.

    pfcp_replay.py UPF_IP SRC_IP DIR RAN_IP FIRST LAST [UP_SEID] PCAP

Sends the messages numbered FIRST..=LAST (e.g. 01 to 03) in order, each retransmitted after a
second (3 times at most), with the placeholder UP SEID (bytes 4..12 of a session message)
replaced by UP_SEID, and an F-TEID the SMF allocated (free5GC: 10.3.0.1 in its config) moved
to RAN_IP (a node's `ran` address). Prints one JSON object: the cause of each answer by
message name, the UP SEID of an establishment's answer, and the F-TEIDs of its Created PDRs.
Every request and answer is appended to PCAP for tshark.

With REPORTS=N in the environment it then waits (REPORT_WAIT seconds, default 5) for N Session
Report Requests from the UPF, answers each (Request accepted) and lists them under "reports":
the Report Type's flags, the Downlink Data Report's PDR IDs, each Usage Report and the address
the request came from. The Usage
Reports of answers (deletion, Query URR) are listed under "usage". The script binds SRC:8805
(the SMF's PFCP port, where a UPF sends its requests) when it is free."""
import glob
import json
import os
import socket
import struct
import sys
import time

from scapy.all import IP, UDP, Ether, wrpcap
from scapy.contrib.pfcp import (  # noqa: F401
    PFCP, IE_Cause, IE_FSEID, IE_FTEID, IE_CreatedPDR, IE_ReportType, IE_DownlinkDataReport,
    IE_PDR_Id, IE_UsageReport_SDR, IE_UsageReport_SMR, IE_UsageReport_SRR, IE_URR_Id,
    IE_UR_SEQN, IE_UsageReportTrigger, IE_VolumeMeasurement, IE_DurationMeasurement,
    IE_RecoveryTimeStamp, PFCPSessionReportResponse, PFCPHeartbeatResponse)

UPF, SRC, DIR, RAN = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
FIRST, LAST = int(sys.argv[5]), int(sys.argv[6])
SEID = int(sys.argv[7], 0) if len(sys.argv) > 8 else None
PCAP = sys.argv[-1]
# The SMF's own SEID, as the vectors' CP F-SEID give it: the SEID of its answers' headers.
SEID_CP = 1

sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    sock.bind((SRC, 8805))
except OSError:
    sock.bind((SRC, 0))
sock.settimeout(1.0)
frames = []


def find(ies, cls):
    out = []
    for ie in ies:
        if isinstance(ie, cls):
            out.append(ie)
        out.extend(find(getattr(ie, "IE_list", []) or [], cls))
    return out


def patch(b):
    b = bytearray(b)
    if b[0] & 0x01 and SEID is not None and b[1] in (52, 54):
        b[4:12] = struct.pack(">Q", SEID)
    # F-TEID (type 21) with V4 and no CH: TEID then the IPv4 address 10.3.0.1.
    i = 0
    want = bytes([0, 21])
    while True:
        i = b.find(want, i)
        if i < 0:
            break
        ln = struct.unpack(">H", b[i + 2:i + 4])[0]
        if ln == 9 and b[i + 4] == 0x01 and bytes(b[i + 9:i + 13]) == bytes([10, 3, 0, 1]):
            b[i + 9:i + 13] = socket.inet_aton(RAN)
        i += 2
    return bytes(b)


def usage_reports(ies):
    """The Usage Reports among `ies` (any of the three kinds) as dicts."""
    out = []
    for u in find(ies, (IE_UsageReport_SDR, IE_UsageReport_SMR, IE_UsageReport_SRR)):
        sub = u.IE_list or []
        r = {"urr_id": None, "seqn": None, "trigger": [], "volume": None, "duration": None}
        for ie in sub:
            if isinstance(ie, IE_URR_Id):
                r["urr_id"] = ie.id
            elif isinstance(ie, IE_UR_SEQN):
                r["seqn"] = ie.number
            elif isinstance(ie, IE_UsageReportTrigger):
                r["trigger"] = [f.name for f in ie.fields_desc
                                if f.name not in ("ietype", "length", "extra_data")
                                and getattr(ie, f.name)]
            elif isinstance(ie, IE_VolumeMeasurement):
                r["volume"] = {"total": ie.total if ie.TOVOL else None,
                               "uplink": ie.uplink if ie.ULVOL else None,
                               "downlink": ie.downlink if ie.DLVOL else None}
            elif isinstance(ie, IE_DurationMeasurement):
                r["duration"] = ie.duration
        out.append(r)
    return out


out = {"causes": {}, "up_seid": None, "created": [], "usage": [], "reports": []}
for path in sorted(glob.glob(os.path.join(DIR, "*.bin"))):
    name = os.path.basename(path)[:-4]
    try:
        n = int(name[:2])
    except ValueError:
        continue
    if not FIRST <= n <= LAST or not name[2] == "-":
        continue
    req = patch(open(path, "rb").read())
    seq = struct.unpack(">I", b"\0" + req[(12 if req[0] & 1 else 4):][:3])[0]
    answer = None
    for _ in range(3):
        sock.sendto(req, (UPF, 8805))
        try:
            while True:
                data, _ = sock.recvfrom(65535)
                off = 12 if data[0] & 1 else 4
                if struct.unpack(">I", b"\0" + data[off:off + 3])[0] == seq:
                    answer = data
                    break
        except socket.timeout:
            continue
        break
    frames.append(Ether() / IP(src=SRC, dst=UPF) / UDP(sport=8805, dport=8805) / req)
    if answer is None:
        out["causes"][name] = None
        continue
    frames.append(Ether() / IP(src=UPF, dst=SRC) / UDP(sport=8805, dport=8805) / answer)
    p = PFCP(answer)
    causes = find(p.IE_list or [], IE_Cause)
    out["causes"][name] = causes[0].cause if causes else "none"
    for f in find(p.IE_list or [], IE_FSEID):
        out["up_seid"] = f.seid
    for c in find(p.IE_list or [], IE_CreatedPDR):
        for t in find(c.IE_list or [], IE_FTEID):
            out["created"].append({"teid": t.TEID, "ipv4": t.ipv4})
    out["usage"].extend(usage_reports(p.IE_list or []))

# The UPF's own requests: Session Report Requests (answered, listed) and heartbeats (answered).
want = int(os.environ.get("REPORTS", "0"))
deadline = time.monotonic() + float(os.environ.get("REPORT_WAIT", "5"))
while len(out["reports"]) < want and time.monotonic() < deadline:
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        data, peer = sock.recvfrom(65535)
    except socket.timeout:
        break
    p = PFCP(data)
    if p.message_type == 56:
        t = find(p.IE_list or [], IE_ReportType)
        rep = {
            "seid": p.seid,
            "type": [f for f in ("USAR", "DLDR", "ERIR", "UPIR") if t and getattr(t[0], f)],
            "pdrs": [i.id for d in find(p.IE_list or [], IE_DownlinkDataReport)
                     for i in find(d.IE_list or [], IE_PDR_Id)],
            "usage": usage_reports(p.IE_list or []),
            "from": peer[0],
        }
        ans = PFCP(version=1, S=1, seid=SEID_CP, seq=p.seq) / PFCPSessionReportResponse(
            IE_list=[IE_Cause(cause=1)])
        out["reports"].append(rep)
    elif p.message_type == 1:
        # The Recovery Time Stamp the vectors' Association Setup Requests carry
        # (crates/pfcp/tests/data/smf/gen.py RECOVERY, 2026-01-01): a different one would tell
        # the UPF that this SMF restarted, and it deletes the SMF's sessions.
        ans = PFCP(version=1, S=0, seq=p.seq) / PFCPHeartbeatResponse(
            IE_list=[IE_RecoveryTimeStamp(timestamp=3976214400)])
    else:
        continue
    sock.sendto(bytes(ans), peer)
    frames.append(Ether() / IP(src=peer[0], dst=SRC) / UDP(sport=peer[1], dport=8805) / data)
    frames.append(Ether() / IP(src=SRC, dst=peer[0]) / UDP(sport=8805, dport=peer[1]) / bytes(ans))

wrpcap(PCAP, frames, append=os.path.exists(PCAP))
print(json.dumps(out))
