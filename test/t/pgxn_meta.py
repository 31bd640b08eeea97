"""Check a META.json against the PGXN meta spec 1.0.0 (https://pgxn.org/meta/spec.txt):
the keys it requires and allows, SemVer versions, version ranges in prereqs,
the license names it knows.  Prints one line per fault; none when it is valid.
Usage: python3 pgxn_meta.py META.json
"""
import json
import os
import re
import sys

NUM = r"(?:0|[1-9]\d*)"
IDENT = r"(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)"
SEMVER = rf"{NUM}\.{NUM}\.{NUM}(?:-{IDENT}(?:\.{IDENT})*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
RANGE_ITEM = rf"(?:(?:[=!]=|[<>]=?)\s*)?{SEMVER}"
RANGE = re.compile(rf"^(?:0|{RANGE_ITEM}(?:,\s*{RANGE_ITEM})*)$")
VERSION = re.compile(rf"^{SEMVER}$")
TERM = re.compile(r"^[^\s/\\:]{2,}$")
LICENSES = {
    "agpl_3", "apache_1_1", "apache_2_0", "artistic_1", "artistic_2", "bsd", "freebsd", "gfdl_1_2",
    "gfdl_1_3", "gpl_1", "gpl_2", "gpl_3", "lgpl_2_1", "lgpl_3_0", "mit", "mozilla_1_0", "mozilla_1_1",
    "openssl", "perl_5", "postgresql", "qpl_1_0", "ssleay", "sun", "zlib", "open_source", "restricted",
    "unrestricted", "unknown",
}
KEYS = {
    "name", "version", "abstract", "maintainer", "license", "provides", "meta-spec", "description",
    "generated_by", "tags", "no_index", "prereqs", "release_status", "resources",
}
REQUIRED = ["name", "version", "abstract", "maintainer", "license", "provides", "meta-spec"]
PHASES = {"configure", "build", "test", "runtime", "develop"}
RELATIONS = {"requires", "recommends", "suggests", "conflicts"}


def text(v):
    return isinstance(v, str) and v != ""


def check(meta, root):
    faults = []
    for key in REQUIRED:
        if key not in meta:
            faults.append(f"{key}: missing")
    for key in meta:
        if key not in KEYS and not re.match(r"^[xX]_.", key):
            faults.append(f"{key}: not a key of the spec")
    if "name" in meta and not (text(meta["name"]) and TERM.match(meta["name"])):
        faults.append("name: not a term")
    if "version" in meta and not (text(meta["version"]) and VERSION.match(meta["version"])):
        faults.append(f"version: {meta['version']!r} is not SemVer")
    for key in ("abstract", "description", "generated_by"):
        if key in meta and not text(meta[key]):
            faults.append(f"{key}: not a non-empty string")
    m = meta.get("maintainer")
    if m is not None and not (text(m) or (isinstance(m, list) and m and all(text(x) for x in m))):
        faults.append("maintainer: not a name or a list of names")
    lic = meta.get("license")
    if lic is not None and not (
        (isinstance(lic, str) and lic in LICENSES)
        or (isinstance(lic, list) and lic and all(x in LICENSES for x in lic))
        or (isinstance(lic, dict) and lic and all(text(u) and re.match(r"^https?://", u) for u in lic.values()))
    ):
        faults.append(f"license: {lic!r} is not a license the spec knows")
    provides = meta.get("provides")
    if provides is not None:
        if not isinstance(provides, dict) or not provides:
            faults.append("provides: not an object of extensions")
        else:
            for ext, p in provides.items():
                if not TERM.match(ext):
                    faults.append(f"provides.{ext}: not a term")
                if not isinstance(p, dict) or "file" not in p or "version" not in p:
                    faults.append(f"provides.{ext}: needs file and version")
                    continue
                if not VERSION.match(str(p["version"])):
                    faults.append(f"provides.{ext}.version: {p['version']!r} is not SemVer")
                for f in ("file", "docfile"):
                    if f in p and not os.path.isfile(os.path.join(root, p[f])):
                        faults.append(f"provides.{ext}.{f}: {p[f]} does not exist")
                for k in p:
                    if k not in ("file", "docfile", "version", "abstract") and not re.match(r"^[xX]_.", k):
                        faults.append(f"provides.{ext}.{k}: not a key of the spec")
    spec = meta.get("meta-spec")
    if spec is not None and (not isinstance(spec, dict) or spec.get("version") != "1.0.0"):
        faults.append("meta-spec: version is not 1.0.0")
    for phase, relations in (meta.get("prereqs") or {}).items():
        if phase not in PHASES:
            faults.append(f"prereqs.{phase}: not a phase of the spec")
            continue
        for relation, reqs in relations.items():
            if relation not in RELATIONS:
                faults.append(f"prereqs.{phase}.{relation}: not a relationship of the spec")
                continue
            for name, rng in reqs.items():
                if not (rng == 0 or (isinstance(rng, str) and RANGE.match(rng))):
                    faults.append(f"prereqs.{phase}.{relation}.{name}: {rng!r} is not a version range")
    if "release_status" in meta and meta["release_status"] not in ("stable", "testing", "unstable"):
        faults.append("release_status: not stable, testing or unstable")
    tags = meta.get("tags")
    if tags is not None and not (isinstance(tags, list) and tags and all(text(t) and len(t) <= 255 for t in tags)):
        faults.append("tags: not a list of short strings")
    return faults


if __name__ == "__main__":
    path = sys.argv[1]
    for fault in check(json.load(open(path)), os.path.dirname(os.path.abspath(path))):
        print(fault)
