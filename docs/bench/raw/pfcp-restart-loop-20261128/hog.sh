#!/bin/bash
# N busy loops for S seconds (simulates other helpers' builds); pids to /tmp/hog.pids
N=$1; S=$2; : > /tmp/hog.pids
for i in $(seq $N); do timeout $S sh -c 'while :; do :; done' & echo $! >> /tmp/hog.pids; done
