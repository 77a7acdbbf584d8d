//! The traffic generator and sink: downstream flows stamped with sequence numbers and send times, checked on arrival.
