#!/bin/sh
# prepare.sh WORKDIR: set up the fix-tests example on real input.
#
#  1. enable deb-src entries mirroring this machine's own apt sources
#     (enable-deb-src.sh) and fetch the Debian source package of cJSON
#     (`apt-get source cjson`: upstream tarball + Debian's patches applied);
#  2. make it a git repository (commit "initial: Debian source of cjson <ver>");
#  3. apply regression.patch (cJSON_Compare forgets that arrays of different
#     lengths differ) and commit it as "regression";
#  4. write WORKDIR/script.json, a durabox.Script input that builds and tests
#     the repository in a sandbox, writes the fixed cJSON.c, tests again,
#     commits and checkpoints.
# Needs root (apt). Re-running with the same WORKDIR starts from scratch.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=${1:?usage: prepare.sh WORKDIR}
pkg=${DBX_EXAMPLE_PACKAGE:-cjson}

need=""
command -v dpkg-source >/dev/null 2>&1 || need="$need dpkg-dev"
command -v git >/dev/null 2>&1 || need="$need git"
command -v python3 >/dev/null 2>&1 || need="$need python3-minimal"
command -v cmake >/dev/null 2>&1 || need="$need cmake"
command -v cc >/dev/null 2>&1 || need="$need gcc libc6-dev"
"$here/enable-deb-src.sh"
if [ -n "$need" ]; then
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
fi

rm -rf "$work/src" "$work/repo" "$work/script.json"
mkdir -p "$work/src"
work=$(cd "$work" && pwd)
(cd "$work/src" && apt-get source -qq "$pkg")
srcdir=$(find "$work/src" -mindepth 1 -maxdepth 1 -type d | head -n 1)
[ -n "$srcdir" ] || { echo "prepare: apt-get source $pkg gave no directory" >&2; exit 1; }
version=$(cd "$srcdir" && dpkg-parsechangelog -S Version 2>/dev/null || basename "$srcdir")
cp -a "$srcdir" "$work/repo"
rm -rf "$work/repo/.pc"  # quilt's bookkeeping, not part of the source

cd "$work/repo"
git init -q -b main
git config user.name "durabox example"
git config user.email "example@durabox.invalid"
git add -A
git commit -q -m "initial: Debian source of $pkg $version"
cp cJSON.c "$work/cJSON.c.fixed"   # the correct file: the fix the script writes back
git apply "$here/regression.patch"
git commit -q -am "regression: cJSON_Compare treats an array and its prefix as equal"

python3 - "$here/script.template.json" "$work/repo" "$work/cJSON.c.fixed" \
  "$work/script.json" <<'PY'
import json, sys
template, repo, fixed, out = sys.argv[1:5]
with open(template) as f:
    script = json.load(f)
with open(fixed, encoding="utf-8") as f:
    content = f.read()
def fill(v):
    if isinstance(v, str):
        return v.replace("@REPO@", repo)
    if isinstance(v, list):
        return [fill(x) for x in v]
    if isinstance(v, dict):
        return {k: (content if x == "@FIXED_CONTENT@" else fill(x)) for k, x in v.items()}
    return v
with open(out, "w") as f:
    json.dump(fill(script), f, indent=2)
    f.write("\n")
PY
echo "prepared: $work/repo ($pkg $version, HEAD = regression); script: $work/script.json"
