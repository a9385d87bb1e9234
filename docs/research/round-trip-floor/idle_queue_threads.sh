#!/bin/bash
# Put every rampart FUSE queue thread (fuser-q*) under SCHED_IDLE, as they appear.
while true; do
  for p in $(pgrep -x rampart); do
    for t in /proc/$p/task/*; do
      case $(cat $t/comm 2>/dev/null) in fuser-q*) chrt --idle -p 0 ${t##*/} >/dev/null 2>&1;; esac
    done
  done
  sleep 0.05
done
