//! The cluster topology on one machine: network namespaces, veths and a Linux bridge, created and removed exactly.
