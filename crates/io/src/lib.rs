//! Packet I/O behind one Port trait: AF_PACKET (TPACKET_V3), in-memory rings, AF_XDP; the only crate that makes packet syscalls.
