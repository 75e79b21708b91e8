#!/bin/sh
# Enable source packages (deb-src) mirroring this machine's own apt sources.
# Writes /etc/apt/sources.list.d/durabox-src.{sources,list} derived from the
# configured deb entries (no host is named here), then runs apt-get update
# (waiting for another apt's lock).
# Idempotent; needs root. Does nothing when deb-src entries already exist.
set -eu
d=/etc/apt/sources.list.d
if grep -Eqs '^[[:space:]]*deb-src[[:space:]]' /etc/apt/sources.list $d/*.list 2>/dev/null ||
   grep -Eqs '^Types:.*deb-src' $d/*.sources 2>/dev/null; then
  have=1
else
  have=0
fi
if [ "$have" = 0 ]; then
  # deb822 files: copy every stanza whose Types include "deb", as deb-src.
  for f in $d/*.sources; do
    [ -e "$f" ] || continue
    awk 'BEGIN { RS = ""; ORS = "\n\n" }
         /(^|\n)Types:[^\n]*[[:space:]]deb([[:space:]]|\n|$)/ {
           sub(/(^|\n)Types:[^\n]*/, "\nTypes: deb-src"); sub(/^\n/, ""); print }' "$f"
  done > $d/durabox-src.sources.tmp
  if [ -s $d/durabox-src.sources.tmp ]; then
    mv $d/durabox-src.sources.tmp $d/durabox-src.sources
  else
    rm -f $d/durabox-src.sources.tmp
  fi
  # One-line format: every "deb ..." line becomes "deb-src ...".
  for f in /etc/apt/sources.list $d/*.list; do
    [ -e "$f" ] || continue
    case "$f" in */durabox-src.list) continue ;; esac
    sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f"
  done > $d/durabox-src.list.tmp
  if [ -s $d/durabox-src.list.tmp ]; then
    mv $d/durabox-src.list.tmp $d/durabox-src.list
  else
    rm -f $d/durabox-src.list.tmp
  fi
fi
# Another apt (a second example at the same time, unattended upgrades) may
# hold the lists lock: wait for it, up to 5 minutes, rather than fail.
tries=0
until out=$(apt-get update -qq 2>&1); do
  case "$out" in
    *"Could not get lock"*) ;;
    *) printf '%s\n' "$out" >&2; exit 1 ;;
  esac
  tries=$((tries + 1))
  if [ "$tries" -ge 150 ]; then
    printf '%s\n' "$out" >&2
    echo "enable-deb-src: apt's lock was held for 5 minutes" >&2
    exit 1
  fi
  sleep 2
done
[ -z "$out" ] || printf '%s\n' "$out"
