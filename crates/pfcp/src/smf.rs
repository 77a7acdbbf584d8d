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
            create_bar: None,
        }),
    }
}

/// The request open5gs's SMF sends for an IPv4 PDU session, as bytes: the test vector
/// `tests/data/smf/open5gs/02-session-establishment-request.bin` (written IE for IE from
/// open5gs's `src/smf/n4-build.c`; see that folder's README), with `sequence`, the SMF's
/// address (Node ID, CP F-SEID), its CP SEID and `ue` written over the vector's values in
/// place, every other byte as open5gs encodes it. Four PDRs (downlink, uplink with F-TEID
/// CHOOSE ID, the CP-function pair for IPv6 router solicitations), three FARs (the downlink one
/// BUFF|NOCP with a BAR until the gNB's tunnel is known), a URR (volume threshold) and a QER
/// (session AMBR as MBR, QFI 1): what `smf-sim --shape open5gs` and `bench pfcp` send.
pub fn establishment_open5gs(sequence: u32, smf: Ipv4Addr, cp_seid: u64, ue: Ipv4Addr) -> Vec<u8> {
    let mut b =
        include_bytes!("../tests/data/smf/open5gs/02-session-establishment-request.bin").to_vec();
    // Header (S=1): flags, type, length (2), SEID (8), sequence (3), spare.
    b[12..15].copy_from_slice(&sequence.to_be_bytes()[1..]);
    patch_ies(&mut b[16..], smf, cp_seid, ue);
    b
}

/// Writes our values over the open5gs vector's in the IEs of `ies` (recursing into Create PDR
/// and its PDI). The vector is a constant of this crate: its IEs are well formed (its tests
/// parse it), so a short IE here only stops the walk.
fn patch_ies(ies: &mut [u8], smf: Ipv4Addr, cp_seid: u64, ue: Ipv4Addr) {
    let mut at = 0;
    while at + 4 <= ies.len() {
        let t = u16::from_be_bytes([ies[at], ies[at + 1]]);
        let len = usize::from(u16::from_be_bytes([ies[at + 2], ies[at + 3]]));
        let Some(v) = ies.get_mut(at + 4..at + 4 + len) else {
            return;
        };
        match t {
            // Node ID: type IPv4.
            60 if len == 5 && v[0] == 0 => v[1..5].copy_from_slice(&smf.octets()),
            // F-SEID with V4: flags, SEID, IPv4.
            57 if len == 13 && v[0] & 0x02 != 0 => {
                v[1..9].copy_from_slice(&cp_seid.to_be_bytes());
                v[9..13].copy_from_slice(&smf.octets());
            }
            // UE IP Address with V4: flags, then the IPv4 address.
            93 if len >= 5 && v[0] & 0x02 != 0 => v[1..5].copy_from_slice(&ue.octets()),
            // Create PDR, PDI: grouped.
            1 | 2 => patch_ies(v, smf, cp_seid, ue),
            _ => {}
        }
        at += 4 + len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open5gs_shape_is_the_vector_with_our_values() {
        const VECTOR: &[u8] =
            include_bytes!("../tests/data/smf/open5gs/02-session-establishment-request.bin");
        let ue = Ipv4Addr::new(20, 1, 2, 3);
        let smf = Ipv4Addr::new(10, 3, 0, 253);
        let bytes = establishment_open5gs(77, smf, 0x1234, ue);
        assert_eq!(bytes.len(), VECTOR.len());
        let m = Message::parse(&bytes).unwrap();
        assert_eq!(m.sequence, 77);
        let Body::SessionEstablishmentRequest(r) = &m.body else {
            panic!("{m:?}");
        };
        assert_eq!(r.node_id, NodeId::Ipv4(smf));
        assert_eq!((r.cp_f_seid.seid, r.cp_f_seid.ipv4), (0x1234, Some(smf)));
        assert_eq!((r.create_pdr.len(), r.create_far.len()), (4, 3));
        assert_eq!((r.create_urr.len(), r.create_qer.len()), (1, 1));
        assert!(r.create_bar.is_some());
        // The UE's address is in the downlink PDR (open5gs's uplink PDRs carry none).
        let ues: Vec<_> = (r.create_pdr.iter())
            .filter_map(|p| p.pdi.ue_ip_address.as_ref()?.ipv4)
            .collect();
        assert_eq!(ues, [UeAddr::Addr(ue)]);
        // Nothing else changed: the vector with the same values put back is the vector.
        let Message { body, .. } = Message::parse(VECTOR).unwrap();
        let Body::SessionEstablishmentRequest(v) = body else {
            panic!("vector");
        };
        let back = establishment_open5gs(2, v.cp_f_seid.ipv4.unwrap(), v.cp_f_seid.seid, {
            let Some(UeAddr::Addr(a)) = v.create_pdr[0].pdi.ue_ip_address.unwrap().ipv4 else {
                panic!("vector UE");
            };
            a
        });
        assert_eq!(back, VECTOR);
    }
}
