#!/bin/sh
# Regenerates the SMF test vectors and checks them with tshark: every message must decode as
# PFCP without [Malformed Packet] and without any expert info (errors, warnings, notes),
# and the frame count must match the .bin files. Needs Debian's python3-scapy and tshark.
set -eu
cd "$(dirname "$0")"
/usr/bin/python3 gen.py
status=0
for smf in open5gs free5gc; do
    pcap=$smf.pcap
    bins=$(ls "$smf"/*.bin | wc -l)
    frames=$(tshark -r "$pcap" 2>/dev/null | wc -l)
    pfcp=$(tshark -r "$pcap" -Y pfcp 2>/dev/null | wc -l)
    bad=$(tshark -r "$pcap" -Y '_ws.malformed || _ws.expert' 2>/dev/null | wc -l)
    malformed=$(tshark -r "$pcap" -V 2>/dev/null | grep -c 'Malformed' || true)
    echo "$pcap: $frames frames, $pfcp PFCP, $bins .bin files, $bad with expert info/malformed, $malformed 'Malformed' lines"
    tshark -r "$pcap" -q -z expert 2>/dev/null | sed 's/^/    /'
    if [ "$frames" -ne "$bins" ] || [ "$pfcp" -ne "$bins" ] || [ "$bad" -ne 0 ] || [ "$malformed" -ne 0 ]; then
        status=1
    fi
done
[ "$status" -eq 0 ] && echo "OK" || echo "FAILED"
exit "$status"
