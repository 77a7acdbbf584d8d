#!/usr/bin/python3
"""PFCP requests as stock open5gs and free5GC SMFs put them on the wire, IE for IE.

Run with Debian's scapy: `/usr/bin/python3 gen.py` (from any directory). Writes
open5gs/NN-name.bin and free5gc/NN-name.bin (raw PFCP, the UDP payload), and
open5gs.pcap / free5gc.pcap (each message in Ether/IPv4/UDP 8805, SMF 10.3.0.254 ->
UPF 10.3.0.1) for tshark.

Every IE is encoded here by hand, byte for byte as the SMF's own encoder does it (see
README.md for the source line of each IE), so that quirks survive (open5gs' 2-octet Apply
Action and 3-octet Reporting Triggers, free5GC's 1-octet Apply Action, 2-octet Reporting
Triggers, MP=1 header with message priority 12, raw-string Network Instance, map-ordered
Create QER/URR). scapy.contrib.pfcp then parses every message and must re-serialize it to
the same bytes (a check that scapy reads the same IE structure), and writes the pcaps.

SEIDs: the establishment request carries SEID 0 in the header (both SMFs). Later session
messages carry the UP SEID the UPF answered in its F-SEID; here the placeholder
UP_SEID = 0x0001000000000001 stands at header bytes 4..12 (S=1), which a test substitutes.
"""
import os
import socket
import struct
import sys
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------- values
SMF_N4 = "10.3.0.254"          # SMF N4 (PFCP) address; also its Node ID and F-SEID address
SMF_GTPU = "10.3.0.254"        # open5gs SMF GTP-U address (UP2CP FAR outer header)
UPF_N4 = "10.3.0.1"            # where the pcaps send it (our node 0's pfcp_addr)
UPF_N3_FREE5GC = "10.3.0.1"    # free5GC: the UPF N3 address from smfcfg.yaml (CP-chosen F-TEID)
GNB = "192.168.1.10"
GNB2 = "192.168.1.11"
GNB_TEID_1 = 0x00000001        # gNB DL TEID at establishment (PDU Session Resource Setup Rsp)
GNB_TEID_2 = 0x00000002        # gNB DL TEID after the service request (re-activation)
GNB2_TEID = 0x00000101         # target gNB DL TEID (Xn handover, Path Switch Request)
UP_SEID = 0x0001000000000001   # placeholder: the UP F-SEID's SEID from the UPF's answer
DNN = "internet"
AMBR_BPS = 1_000_000_000       # session AMBR 1 Gbps up and down
IMSI = "001010000000001"
RECOVERY = int(datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()) + 2208988800

O5_UE4 = "10.45.0.2"           # first address of open5gs' 10.45.0.0/16 (gateway .1)
O5_UE6 = "2001:db8:cafe:1::2"  # first of 2001:db8:cafe::/48 as ogs_pfcp_ue_pool_generate makes it
F5_UE4 = "10.60.0.1"           # first address of free5GC's 10.60.0.0/16 pool

# ---------------------------------------------------------------- IE type numbers (TS 29.244 8.1.2)
CREATE_PDR, PDI, CREATE_FAR, FWD_PARAMS, CREATE_URR, CREATE_QER = 1, 2, 3, 4, 6, 7
UPDATE_PDR, UPDATE_FAR, UPD_FWD_PARAMS = 9, 10, 11
CAUSE, SOURCE_IF, F_TEID, NETWORK_INSTANCE, SDF_FILTER = 19, 20, 21, 22, 23
GATE_STATUS, MBR, PRECEDENCE, VOLUME_THRESHOLD = 25, 26, 29, 31
REPORTING_TRIGGERS, DEST_IF, APPLY_ACTION, PFCPSMREQ_FLAGS = 37, 42, 44, 49
PDR_ID, F_SEID, NODE_ID, MEASUREMENT_METHOD, MEASUREMENT_PERIOD = 56, 57, 60, 62, 64
URR_ID, OHC, CREATE_BAR, BAR_ID, CP_FEATURES = 81, 84, 85, 88, 89
UE_IP, OHR, RECOVERY_TS, MEAS_INFO, FAR_ID, QER_ID = 93, 95, 96, 100, 108, 109
PDN_TYPE, QFI, USER_ID, APN_DNN, IF_TYPE_3GPP, S_NSSAI = 113, 124, 141, 159, 160, 257

# message types
HEARTBEAT_REQ, ASSOC_SETUP_REQ = 1, 5
EST_REQ, MOD_REQ, DEL_REQ = 50, 52, 54


def ie(t, *parts):
    """One IE: type, length, value (grouped IEs: the value is the concatenated children)."""
    v = b"".join(parts)
    return struct.pack("!HH", t, len(v)) + v


def u8(x): return struct.pack("!B", x)
def u16(x): return struct.pack("!H", x)
def u32(x): return struct.pack("!I", x)
def u64(x): return struct.pack("!Q", x)
def v4(a): return socket.inet_pton(socket.AF_INET, a)
def v6(a): return socket.inet_pton(socket.AF_INET6, a)
def u40(x): return struct.pack("!Q", x)[3:]


def labels(name):
    """DNS label encoding (ogs_fqdn_build, RFC 1035 without the root)."""
    return b"".join(u8(len(p)) + p.encode() for p in name.split("."))


def tbcd(digits):
    out = bytearray()
    for i in range(0, len(digits), 2):
        lo = int(digits[i])
        hi = int(digits[i + 1]) if i + 1 < len(digits) else 0xF
        out.append(hi << 4 | lo)
    return bytes(out)


def header(mtype, body, seq, seid=None, mp=None):
    """PFCP header (TS 29.244 7.2.2). seid None: S=0. mp: message priority (sets MP=1)."""
    flags = 0x20 | (0x02 if mp is not None else 0) | (0x01 if seid is not None else 0)
    rest = (u64(seid) if seid is not None else b"") + struct.pack(
        "!I", seq << 8 | ((mp << 4) if mp is not None else 0))
    return struct.pack("!BBH", flags, mtype, len(rest) + len(body)) + rest + body


# ================================================================ open5gs
def o5_node_id():
    return ie(NODE_ID, u8(0), v4(SMF_N4))                       # type 0 = IPv4


def o5_est(ipv6):
    """smf_5gc_n4_build... = smf_n4_build_session_establishment_request for the first session."""
    fteid_ul = ie(F_TEID, u8(0x0F), u8(5))       # V4|V6|CH|CHID, CHOOSE ID 5 (UL and UP2CP share it)
    fteid_cp = ie(F_TEID, u8(0x07))              # V4|V6|CH, no CHOOSE ID (CP2UP)
    ni = ie(NETWORK_INSTANCE, labels(DNN))
    if ipv6:
        ue = ie(UE_IP, u8(0x07), v4(O5_UE4), v6(O5_UE6))        # V6|V4|S/D(dst)
    else:
        ue = ie(UE_IP, u8(0x06), v4(O5_UE4))                    # V4|S/D(dst)
    ohr = ie(OHR, u8(6))                                        # GTP-U/UDP/IP, 1 octet
    rs = b"permit out 58 from ff02::2/128 to assigned"
    pdrs = [
        # PDR 1: downlink (Core), default precedence
        ie(CREATE_PDR, ie(PDR_ID, u16(1)), ie(PRECEDENCE, u32(65535)),
           ie(PDI, ie(SOURCE_IF, u8(1)), ni, ue, ie(IF_TYPE_3GPP, u8(17))),   # N6
           ie(FAR_ID, u32(1)), ie(URR_ID, u32(1)), ie(QER_ID, u32(1))),
        # PDR 2: uplink (Access), F-TEID CHOOSE
        ie(CREATE_PDR, ie(PDR_ID, u16(2)), ie(PRECEDENCE, u32(65535)),
           ie(PDI, ie(SOURCE_IF, u8(0)), fteid_ul, ni, ie(QFI, u8(1)),
              ie(IF_TYPE_3GPP, u8(11))),                                      # N3 3GPP access
           ohr, ie(FAR_ID, u32(2)), ie(QER_ID, u32(1))),
        # PDR 3: CP2UP (source interface CP-function; downlink FAR 1)
        ie(CREATE_PDR, ie(PDR_ID, u16(3)), ie(PRECEDENCE, u32(255)),
           ie(PDI, ie(SOURCE_IF, u8(3)), fteid_cp),
           ohr, ie(FAR_ID, u32(1))),
        # PDR 4: UP2CP (router solicitations to the SMF)
        ie(CREATE_PDR, ie(PDR_ID, u16(4)), ie(PRECEDENCE, u32(255)),
           ie(PDI, ie(SOURCE_IF, u8(0)), fteid_ul, ni,
              ie(SDF_FILTER, u8(0x01), u8(0), u16(len(rs)), rs),
              ie(IF_TYPE_3GPP, u8(11))),
           ohr, ie(FAR_ID, u32(3))),
    ]
    fars = [
        # FAR 1: downlink, BUFF|NOCP until the gNB tunnel is known (Apply Action: 2 octets)
        ie(CREATE_FAR, ie(FAR_ID, u32(1)), ie(APPLY_ACTION, u8(0x0C), u8(0)), ie(BAR_ID, u8(1))),
        # FAR 2: uplink FORW to Core
        ie(CREATE_FAR, ie(FAR_ID, u32(2)), ie(APPLY_ACTION, u8(0x02), u8(0)),
           ie(FWD_PARAMS, ie(DEST_IF, u8(1)), ni, ie(IF_TYPE_3GPP, u8(17)))),
        # FAR 3: UP2CP FORW to the CP function, GTP-U to the SMF, TEID = session index 1
        ie(CREATE_FAR, ie(FAR_ID, u32(3)), ie(APPLY_ACTION, u8(0x02), u8(0)),
           ie(FWD_PARAMS, ie(DEST_IF, u8(3)),
              ie(OHC, u16(0x0100), u32(1), v4(SMF_GTPU)))),
    ]
    urrs = [ie(CREATE_URR, ie(URR_ID, u32(1)), ie(MEASUREMENT_METHOD, u8(0x02)),    # VOLUM
               ie(REPORTING_TRIGGERS, u8(0x02), u8(0), u8(0)),                   # VOLTH, 3 octets
               ie(VOLUME_THRESHOLD, u8(0x01), u64(100 * 1024 * 1024)))]          # TOVOL 100 MiB
    kbps = AMBR_BPS // 1000
    qers = [ie(CREATE_QER, ie(QER_ID, u32(1)), ie(GATE_STATUS, u8(0)),
               ie(MBR, u40(kbps), u40(kbps)), ie(QFI, u8(1)))]
    body = (o5_node_id()
            + ie(F_SEID, u8(0x02), u64(1), v4(SMF_N4))
            + b"".join(pdrs) + b"".join(fars) + b"".join(urrs) + b"".join(qers)
            + ie(CREATE_BAR, ie(BAR_ID, u8(1)))
            + ie(PDN_TYPE, u8(3 if ipv6 else 1))
            + ie(USER_ID, u8(0x01), u8(8), tbcd(IMSI))                    # IMSIF (bit 1)
            + ie(APN_DNN, labels(DNN))
            + ie(S_NSSAI, u8(1), b"\xff\xff\xff"))                          # SST 1, no SD
    return body


def o5_update_far_forw(addr, teid, sndem=False):
    """ogs_pfcp_build_update_far_activate for the downlink FAR 1."""
    ufp = [ie(DEST_IF, u8(0)), ie(NETWORK_INSTANCE, labels(DNN)),
           ie(OHC, u16(0x0100), u32(teid), v4(addr))]
    if sndem:
        ufp.append(ie(PFCPSMREQ_FLAGS, u8(0x02)))                           # SNDEM
    ufp.append(ie(IF_TYPE_3GPP, u8(11)))
    return ie(UPDATE_FAR, ie(FAR_ID, u32(1)), ie(APPLY_ACTION, u8(0x02), u8(0)),
              ie(UPD_FWD_PARAMS, *ufp))


def open5gs():
    m = []
    m.append(("01-association-setup-request",
              header(ASSOC_SETUP_REQ, o5_node_id() + ie(RECOVERY_TS, u32(RECOVERY))
                     + ie(CP_FEATURES, u8(0)), 1)))
    m.append(("02-session-establishment-request",
              header(EST_REQ, o5_est(False), 2, seid=0)))
    m.append(("03-session-modification-request-gnb-tunnel",
              header(MOD_REQ, o5_update_far_forw(GNB, GNB_TEID_1), 3, seid=UP_SEID)))
    m.append(("04-session-modification-request-idle",
              header(MOD_REQ, ie(UPDATE_FAR, ie(FAR_ID, u32(1)),
                                 ie(APPLY_ACTION, u8(0x0C), u8(0)), ie(BAR_ID, u8(1))),
                     4, seid=UP_SEID)))
    m.append(("05-session-modification-request-reactivate",
              header(MOD_REQ, o5_update_far_forw(GNB, GNB_TEID_2), 5, seid=UP_SEID)))
    m.append(("06-session-modification-request-xn-handover",
              header(MOD_REQ, o5_update_far_forw(GNB2, GNB2_TEID, sndem=True), 6, seid=UP_SEID)))
    m.append(("07-session-deletion-request", header(DEL_REQ, b"", 7, seid=UP_SEID)))
    m.append(("08-heartbeat-request", header(HEARTBEAT_REQ, ie(RECOVERY_TS, u32(RECOVERY)), 8)))
    # dual-stack variant of 02 (PDU session type IPv4v6 with an IPv6 pool configured)
    m.append(("02v6-session-establishment-request-ipv4v6",
              header(EST_REQ, o5_est(True), 2, seid=0)))
    return m


# ================================================================ free5GC
NI_F5 = ie(NETWORK_INSTANCE, DNN.encode())   # nwInstFqdnEncoding: false (stock): raw string
ANY = b"permit out ip from any to assigned"  # PCF default PCC rule, precedence 255
SDF_F5 = ie(SDF_FILTER, u8(0x01), u8(0), u16(len(ANY)), ANY)
CP_FSEID_F5 = ie(F_SEID, u8(0x02), u64(1), v4(SMF_N4))
URR_THRESHOLD = 500000                       # smfcfg.yaml urrThreshold
URR_PERIOD = 30                              # smfcfg.yaml urrPeriod (s)


def f5_dl_pdr_body(urr_ids):
    return (ie(PDR_ID, u16(2)), ie(PRECEDENCE, u32(255)),
            ie(PDI, ie(SOURCE_IF, u8(1)), NI_F5, ie(UE_IP, u8(0x06), v4(F5_UE4)), SDF_F5),
            ie(FAR_ID, u32(2)), *[ie(URR_ID, u32(i)) for i in urr_ids],
            ie(QER_ID, u32(2)), ie(QER_ID, u32(1)))


def f5_est(charging):
    urr_ids = [1, 2] + ([7] if charging else [])
    pdrs = [
        ie(CREATE_PDR, ie(PDR_ID, u16(1)), ie(PRECEDENCE, u32(255)),
           ie(PDI, ie(SOURCE_IF, u8(0)),
              ie(F_TEID, u8(0x01), u32(2), v4(UPF_N3_FREE5GC)),   # V4, TEID chosen by the SMF
              NI_F5, ie(UE_IP, u8(0x02), v4(F5_UE4)), SDF_F5),
           ie(OHR, u8(0)),                                         # GTP-U/UDP/IPv4
           ie(FAR_ID, u32(1)), *[ie(URR_ID, u32(i)) for i in urr_ids],
           ie(QER_ID, u32(2)), ie(QER_ID, u32(1))),
        ie(CREATE_PDR, *f5_dl_pdr_body(urr_ids)),
    ]
    fars = [
        ie(CREATE_FAR, ie(FAR_ID, u32(1)), ie(APPLY_ACTION, u8(0x02)),
           ie(FWD_PARAMS, ie(DEST_IF, u8(1)), NI_F5)),
        # downlink FORW without Outer Header Creation (gNB tunnel not known yet)
        ie(CREATE_FAR, ie(FAR_ID, u32(2)), ie(APPLY_ACTION, u8(0x02)),
           ie(FWD_PARAMS, ie(DEST_IF, u8(0)))),
    ]

    def urr(i, mi):
        return ie(CREATE_URR, ie(URR_ID, u32(i)), ie(MEASUREMENT_METHOD, u8(0x02)),
                  ie(REPORTING_TRIGGERS, u8(0x03), u8(0)),                 # PERIO|VOLTH, 2 octets
                  ie(MEASUREMENT_PERIOD, u32(URR_PERIOD)),
                  ie(VOLUME_THRESHOLD, u8(0x06), u64(URR_THRESHOLD), u64(URR_THRESHOLD)),
                  ie(MEAS_INFO, u8(mi)))
    urrs = [urr(1, 0x11), urr(2, 0x10)]                                    # MNOP|MBQE, MNOP
    if charging:   # offline charging data: URR for the rating group, volume threshold only
        urrs.append(ie(CREATE_URR, ie(URR_ID, u32(7)), ie(MEASUREMENT_METHOD, u8(0x02)),
                       ie(REPORTING_TRIGGERS, u8(0x02), u8(0)),
                       ie(VOLUME_THRESHOLD, u8(0x06), u64(URR_THRESHOLD), u64(URR_THRESHOLD)),
                       ie(MEAS_INFO, u8(0x00))))
    kbps = AMBR_BPS // 1000
    qers = [
        ie(CREATE_QER, ie(QER_ID, u32(1)), ie(GATE_STATUS, u8(0)),
           ie(MBR, u40(kbps), u40(kbps)), ie(QFI, u8(1))),                # session AMBR
        ie(CREATE_QER, ie(QER_ID, u32(2)), ie(GATE_STATUS, u8(0)), ie(QFI, u8(1))),  # QoS flow
    ]
    return (ie(NODE_ID, u8(0), v4(SMF_N4)) + CP_FSEID_F5 + b"".join(pdrs) + b"".join(fars)
            + b"".join(urrs) + b"".join(qers) + ie(PDN_TYPE, u8(1)))


def f5_update_far(aa, addr, teid, sndem):
    return ie(UPDATE_FAR, ie(FAR_ID, u32(2)), ie(APPLY_ACTION, u8(aa)),
              ie(UPD_FWD_PARAMS, ie(DEST_IF, u8(0)), NI_F5,
                 ie(OHC, u8(0x01), u8(0x00), u32(teid), v4(addr)),
                 ie(PFCPSMREQ_FLAGS, u8(0x02 if sndem else 0x00))))


def free5gc():
    m = []
    node = ie(NODE_ID, u8(0), v4(SMF_N4))
    m.append(("01-association-setup-request",
              header(ASSOC_SETUP_REQ, node + ie(RECOVERY_TS, u32(RECOVERY))
                     + ie(CP_FEATURES, u8(0)), 1)))
    m.append(("02-session-establishment-request",
              header(EST_REQ, f5_est(False), 2, seid=0, mp=0)))
    upd_pdr = ie(UPDATE_PDR, *f5_dl_pdr_body([1, 2]))
    m.append(("03-session-modification-request-gnb-tunnel",
              header(MOD_REQ, CP_FSEID_F5 + upd_pdr + f5_update_far(0x02, GNB, GNB_TEID_1, False),
                     3, seid=UP_SEID, mp=12)))
    m.append(("04-session-modification-request-idle",
              header(MOD_REQ, CP_FSEID_F5 + f5_update_far(0x0C, GNB, GNB_TEID_1, False),
                     4, seid=UP_SEID, mp=12)))
    m.append(("05-session-modification-request-reactivate",
              header(MOD_REQ, CP_FSEID_F5 + upd_pdr + f5_update_far(0x02, GNB, GNB_TEID_2, False),
                     5, seid=UP_SEID, mp=12)))
    m.append(("06-session-modification-request-xn-handover",
              header(MOD_REQ, CP_FSEID_F5 + f5_update_far(0x02, GNB2, GNB2_TEID, True),
                     6, seid=UP_SEID, mp=12)))
    m.append(("07-session-deletion-request", header(DEL_REQ, b"", 7, seid=UP_SEID, mp=12)))
    m.append(("08-heartbeat-request", header(HEARTBEAT_REQ, ie(RECOVERY_TS, u32(RECOVERY)), 8)))
    m.append(("02c-session-establishment-request-offline-charging",
              header(EST_REQ, f5_est(True), 2, seid=0, mp=0)))
    return m


# ================================================================ write and check
def main():
    from scapy.all import Ether, IP, UDP, wrpcap, conf
    from scapy.contrib.pfcp import PFCP
    import logging
    conf.verb = 0
    # scapy reads every Network Instance as APN labels; free5GC's raw "internet" makes it warn
    logging.getLogger("scapy").setLevel(logging.ERROR)
    bad = 0
    for smf, msgs in (("open5gs", open5gs()), ("free5gc", free5gc())):
        d = os.path.join(HERE, smf)
        os.makedirs(d, exist_ok=True)
        pkts = []
        for name, raw in msgs:
            with open(os.path.join(d, name + ".bin"), "wb") as f:
                f.write(raw)
            # the length field covers everything after the first 4 octets
            assert struct.unpack("!H", raw[2:4])[0] == len(raw) - 4, name
            p = PFCP(raw)
            if bytes(p) != raw:
                print("scapy re-serializes %s/%s differently" % (smf, name))
                bad += 1
            if p.haslayer("Raw") or p.haslayer("Padding"):
                print("scapy left bytes unparsed in %s/%s" % (smf, name))
                bad += 1
            pkt = (Ether(src="02:00:00:00:00:fe", dst="02:00:00:00:00:01")
                   / IP(src=SMF_N4, dst=UPF_N4, id=len(pkts) + 1)
                   / UDP(sport=8805, dport=8805) / p)
            pkt.time = RECOVERY - 2208988800 + len(pkts)   # fixed: the pcaps are reproducible
            pkts.append(pkt)
            print("%s/%s.bin: %d bytes" % (smf, name, len(raw)))
        wrpcap(os.path.join(HERE, smf + ".pcap"), pkts)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
