//! Checked views and builders of the wire formats the data plane reads and writes (Ethernet, ARP, IPv4/6, UDP, TCP, ICMP, GTP-U).
