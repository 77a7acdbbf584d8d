//! AF_XDP sockets in copy mode (being written).
