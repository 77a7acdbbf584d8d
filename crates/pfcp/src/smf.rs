//! The requests a simple SMF sends (for load generators and tests): an association, and a
//! session with one downlink PDR (source Core, the UE address; FAR FORW with a GTP-U/IPv4
//! outer header to the base station) and one uplink PDR (source Access, F-TEID CHOOSE, outer
//! header removal; FAR FORW to Core).
//!
//! ```
//! use sb_pfcp::smf;
//! use std::net::Ipv4Addr;
//! let smf_addr = Ipv4Addr::new(10, 3, 0, 254);
//! let req = smf::establishment(7, smf_addr, 1007, "100.64.0.7".parse().unwrap(), 0x100, Ipv4Addr::new(10, 2, 0, 2));
//! let bytes = req.to_bytes().unwrap();
//! assert_eq!(sb_pfcp::Message::parse(&bytes).unwrap(), req);
//! ```

use crate::ie::*;
use crate::message::*;
use std::net::{IpAddr, Ipv4Addr};

/// The UE IP Address IE of `ue` (`destination`: the address is a destination, as in a
/// downlink PDR).
pub fn ue_ip(ue: IpAddr, destination: bool) -> UeIpAddress {
    let (ipv4, ipv6) = match ue {
        IpAddr::V4(a) => (Some(UeAddr::Addr(a)), None),
        IpAddr::V6(a) => (None, Some(UeAddr::Addr(a))),
    };
    UeIpAddress {
        ipv4,
        ipv6,
        destination,
        ipv6_prefix_delegation: None,
        ipv6_prefix_length: None,
    }
}

/// The downlink PDR (ID 1, FAR 1) of `ue`.
pub fn downlink_pdr(ue: IpAddr) -> CreatePdr {
    CreatePdr {
        pdr_id: PdrId(1),
        precedence: Precedence(200),
        pdi: Pdi {
            source_interface: Interface::CORE,
            local_f_teid: None,
            network_instance: None,
            ue_ip_address: Some(ue_ip(ue, true)),
            other: vec![],
        },
        outer_header_removal: None,
        far_id: Some(FarId(1)),
        urr_ids: vec![],
        qer_ids: vec![],
    }
}

/// The uplink PDR (ID 2, FAR 2) of `ue`: the UPF chooses the F-TEID.
pub fn uplink_pdr(ue: IpAddr) -> CreatePdr {
    CreatePdr {
        pdr_id: PdrId(2),
        precedence: Precedence(100),
        pdi: Pdi {
            source_interface: Interface::ACCESS,
            local_f_teid: Some(FTeid::Choose {
                ipv4: true,
                ipv6: false,
                choose_id: None,
            }),
            network_instance: None,
            ue_ip_address: Some(ue_ip(ue, false)),
            other: vec![],
        },
        outer_header_removal: Some(OuterHeaderRemoval {
            description: 0,
            extension_header_deletion: None,
        }),
        far_id: Some(FarId(2)),
        urr_ids: vec![],
        qer_ids: vec![],
    }
}

/// The downlink FAR (ID 1): FORW in a GTP-U tunnel (`teid`, `enb`).
pub fn downlink_far(teid: u32, enb: Ipv4Addr) -> CreateFar {
    CreateFar {
        far_id: FarId(1),
        apply_action: ApplyAction(ApplyAction::FORW),
        forwarding_parameters: Some(ForwardingParameters {
            destination_interface: Some(Interface::ACCESS),
            network_instance: None,
            outer_header_creation: Some(OuterHeaderCreation::GtpuIpv4 { teid, addr: enb }),
        }),
    }
}

/// The uplink FAR (ID 2): FORW to Core.
pub fn uplink_far() -> CreateFar {
    CreateFar {
        far_id: FarId(2),
        apply_action: ApplyAction(ApplyAction::FORW),
        forwarding_parameters: Some(ForwardingParameters {
            destination_interface: Some(Interface::CORE),
            network_instance: None,
            outer_header_creation: None,
        }),
    }
}

/// An Association Setup Request from the SMF at `smf` (its Node ID) started at `recovery`.
pub fn association_setup(sequence: u32, smf: Ipv4Addr, recovery: u32) -> Message {
    Message {
        seid: None,
        sequence,
        priority: None,
        body: Body::AssociationSetupRequest(AssociationSetupRequest {
            node_id: NodeId::Ipv4(smf),
            recovery_time_stamp: RecoveryTimeStamp(recovery),
            up_function_features: None,
            cp_function_features: None,
        }),
    }
}

/// A Session Establishment Request of the SMF at `smf` for session `cp_seid` of `ue`, its
/// downlink tunnel (`teid`, `enb`) and an uplink F-TEID the UPF chooses.
pub fn establishment(
    sequence: u32,
    smf: Ipv4Addr,
    cp_seid: u64,
    ue: IpAddr,
    teid: u32,
    enb: Ipv4Addr,
) -> Message {
    Message {
        seid: Some(0),
        sequence,
        priority: None,
        body: Body::SessionEstablishmentRequest(SessionEstablishmentRequest {
            node_id: NodeId::Ipv4(smf),
            cp_f_seid: FSeid {
                seid: cp_seid,
                ipv4: Some(smf),
                ipv6: None,
            },
            create_pdr: vec![downlink_pdr(ue), uplink_pdr(ue)],
            create_far: vec![downlink_far(teid, enb), uplink_far()],
            create_urr: vec![],
            create_qer: vec![],
        }),
    }
}
