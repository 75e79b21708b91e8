#!/bin/sh
# Enable source packages (deb-src) mirroring this machine's own apt sources.
# Writes /etc/apt/sources.list.d/durabox-src.{sources,list} derived from the
# configured deb entries (no host is named here), then runs apt-get update.
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
apt-get update -qq
