"""Builds one PFCP message of each type we handle with scapy (scapy.contrib.pfcp) and prints
them as JSON: [{"name": ..., "hex": ...}]. Run by tests/peers.rs with Debian's /usr/bin/python3;
the Rust side parses each and checks the fields set here."""
import json
import sys

from scapy.contrib.pfcp import *  # noqa: F401,F403

SMF = "10.0.0.1"
SMF6 = "2001:db8::1"
ENB = "192.168.1.10"
UE4 = "10.45.0.7"
UE6 = "2001:db8:45::7"


def node_ip():
    return IE_NodeId(id_type="IPv4", ipv4=SMF)


def pdr_downlink(pdr_id=1, far_id=1, ue=UE4):
    if ":" in ue:
        ueip = IE_UE_IP_Address(V6=1, SD=1, ipv6=ue)
    else:
        ueip = IE_UE_IP_Address(V4=1, SD=1, ipv4=ue)
    return IE_CreatePDR(IE_list=[
        IE_PDR_Id(id=pdr_id),
        IE_Precedence(precedence=200),
        IE_PDI(IE_list=[
            IE_SourceInterface(interface="Core"),
            IE_NetworkInstance(instance=b"internet"),
            ueip,
        ]),
        IE_FAR_Id(id=far_id),
        IE_QER_Id(id=1),
    ])


def pdr_uplink(pdr_id=2, far_id=2):
    return IE_CreatePDR(IE_list=[
        IE_PDR_Id(id=pdr_id),
        IE_Precedence(precedence=100),
        IE_PDI(IE_list=[
            IE_SourceInterface(interface="Access"),
            IE_FTEID(CH=1, CHID=1, V4=1, choose_id=5),
            IE_UE_IP_Address(V4=1, ipv4=UE4),
        ]),
        IE_OuterHeaderRemoval(header="GTP-U/UDP/IPv4"),
        IE_FAR_Id(id=far_id),
    ])


def far_downlink(far_id=1, teid=0x1000, enb=ENB):
    return IE_CreateFAR(IE_list=[
        IE_FAR_Id(id=far_id),
        IE_ApplyAction(FORW=1),
        IE_ForwardingParameters(IE_list=[
            IE_DestinationInterface(interface="Access"),
            IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=teid, ipv4=enb),
        ]),
    ])


def far_uplink(far_id=2):
    return IE_CreateFAR(IE_list=[
        IE_FAR_Id(id=far_id),
        IE_ApplyAction(FORW=1),
        IE_ForwardingParameters(IE_list=[IE_DestinationInterface(interface="Core")]),
    ])


def qer():
    return IE_CreateQER(IE_list=[
        IE_QER_Id(id=1),
        IE_GateStatus(ul="OPEN", dl="CLOSED"),
        IE_MBR(ul=1000000, dl=2000000),
        IE_QFI(QFI=9),
    ])


def urr():
    return IE_CreateURR(IE_list=[
        IE_URR_Id(id=3),
        IE_MeasurementMethod(VOLUM=1),
        IE_ReportingTriggers(volume_threshold=1),
    ])


def msg(seq, body, seid=None):
    if seid is None:
        return PFCP(version=1, S=0, seq=seq) / body
    return PFCP(version=1, S=1, seid=seid, seq=seq) / body


messages = {
    "heartbeat_request": msg(1, PFCPHeartbeatRequest(IE_list=[IE_RecoveryTimeStamp(timestamp=3900000000)])),
    "heartbeat_response": msg(2, PFCPHeartbeatResponse(IE_list=[IE_RecoveryTimeStamp(timestamp=3900000001)])),
    "association_setup_request": msg(3, PFCPAssociationSetupRequest(IE_list=[
        IE_NodeId(id_type="FQDN", id=b"smf.example.org"),
        IE_RecoveryTimeStamp(timestamp=3900000002),
        IE_CPFunctionFeatures(LOAD=1),
    ])),
    "association_setup_response": msg(4, PFCPAssociationSetupResponse(IE_list=[
        IE_NodeId(id_type="IPv6", ipv6=SMF6),
        IE_Cause(cause=1),
        IE_RecoveryTimeStamp(timestamp=3900000003),
        IE_UPFunctionFeatures(FTUP=1),
    ])),
    "association_update_request": msg(5, PFCPAssociationUpdateRequest(IE_list=[node_ip(), IE_CPFunctionFeatures(OVRL=1)])),
    "association_update_response": msg(6, PFCPAssociationUpdateResponse(IE_list=[node_ip(), IE_Cause(cause=1)])),
    "association_release_request": msg(7, PFCPAssociationReleaseRequest(IE_list=[node_ip()])),
    "association_release_response": msg(8, PFCPAssociationReleaseResponse(IE_list=[node_ip(), IE_Cause(cause=1)])),
    "session_establishment_request": msg(9, PFCPSessionEstablishmentRequest(IE_list=[
        node_ip(),
        IE_FSEID(v4=1, seid=0x1111, ipv4=SMF),
        pdr_downlink(),
        pdr_uplink(),
        far_downlink(),
        far_uplink(),
        urr(),
        qer(),
        IE_PDNType(pdn_type="IPv4"),
    ]), seid=0),
    "session_establishment_request_v6": msg(10, PFCPSessionEstablishmentRequest(IE_list=[
        node_ip(),
        IE_FSEID(v6=1, seid=0x2222, ipv6=SMF6),
        pdr_downlink(ue=UE6),
        far_downlink(teid=0xABCDEF01),
    ]), seid=0),
    "session_establishment_response": msg(11, PFCPSessionEstablishmentResponse(IE_list=[
        node_ip(),
        IE_Cause(cause=73),
        IE_OffendingIE(type=56),
        IE_FSEID(v4=1, seid=0x3333, ipv4=SMF),
        IE_CreatedPDR(IE_list=[IE_PDR_Id(id=2), IE_FTEID(V4=1, TEID=0x77, ipv4=ENB)]),
        IE_FailedRuleId(type="PDR", pdr_id=2),
    ]), seid=0x1111),
    "session_modification_request": msg(12, PFCPSessionModificationRequest(IE_list=[
        IE_RemovePDR(IE_list=[IE_PDR_Id(id=2)]),
        IE_RemoveFAR(IE_list=[IE_FAR_Id(id=2)]),
        IE_UpdateFAR(IE_list=[
            IE_FAR_Id(id=1),
            IE_ApplyAction(FORW=1),
            IE_UpdateForwardingParameters(IE_list=[
                IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=0x2000, ipv4="192.168.1.20"),
            ]),
        ]),
        IE_UpdatePDR(IE_list=[IE_PDR_Id(id=1), IE_Precedence(precedence=50)]),
        IE_CreatePDR(IE_list=[
            IE_PDR_Id(id=3),
            IE_Precedence(precedence=100),
            IE_PDI(IE_list=[IE_SourceInterface(interface="Access"), IE_FTEID(CH=1, V4=1),
                            IE_SDF_Filter(FD=1, flow_description=b"permit out ip from any to assigned")]),
            IE_OuterHeaderRemoval(header="GTP-U/UDP/IPv4"),
            IE_FAR_Id(id=1),
        ]),
        IE_RemoveQER(IE_list=[IE_QER_Id(id=1)]),
        IE_RemoveURR(IE_list=[IE_URR_Id(id=3)]),
    ]), seid=0x5555),
    "session_modification_response": msg(13, PFCPSessionModificationResponse(IE_list=[
        IE_Cause(cause=1),
        IE_CreatedPDR(IE_list=[IE_PDR_Id(id=3), IE_FTEID(V4=1, TEID=0x88, ipv4=ENB)]),
    ]), seid=0x1111),
    "session_deletion_request": msg(14, PFCPSessionDeletionRequest(), seid=0x5555),
    "session_deletion_response": msg(15, PFCPSessionDeletionResponse(IE_list=[IE_Cause(cause=65)]), seid=0x1111),
}

out = [{"name": name, "hex": bytes(pkt).hex()} for name, pkt in messages.items()]
json.dump(out, sys.stdout)
