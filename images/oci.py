#!/usr/bin/env python3
"""Assembles an OCI image layout from a binary and the shared libraries it loads, with no
container engine: one reproducible layer (sorted entries, fixed times and owners), its
config and manifest, and an index naming the tag.

    images/oci.py --binary target/release/ne-leader --name ne-leader --tag 0.1.0 \
        --user 65532:65532 --out target/images/ne-leader --label key=value ...

The layer holds the binary at /usr/local/bin/<name>, every library `ldd` lists for it at
the path `ldd` gives (and the dynamic loader), the CA bundle of this machine when it has
one, /etc/passwd and /etc/group naming root and nonroot (65532), and /tmp. Times are
SOURCE_DATE_EPOCH (default 0), so the same inputs give the same digests.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import re
import subprocess
import sys
import tarfile
import time

CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
PASSWD = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
GROUP = "root:x:0:\nnonroot:x:65532:\n"


def libraries(binary):
    """The files the dynamic loader maps for `binary`, as `ldd` resolves them."""
    out = subprocess.run(["ldd", binary], check=True, capture_output=True, text=True).stdout
    paths = []
    for line in out.splitlines():
        line = line.strip()
        if "=>" in line:
            target = line.split("=>", 1)[1].strip().split(" ", 1)[0]
            if target.startswith("/"):
                paths.append(target)
        elif line.startswith("/"):
            paths.append(line.split(" ", 1)[0])
        elif "not found" in line:
            sys.exit(f"oci.py: {binary}: a library is missing: {line}")
    return paths


def layer(binary, name, epoch):
    """The layer's tar bytes: (path in the image, mode, bytes or None for a directory)."""
    entries = {}

    def add_dirs(path):
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            entries.setdefault("/".join(parts[:i]), (0o755, None))

    def add_file(path, mode, data):
        add_dirs(path)
        entries[path.strip("/")] = (mode, data)

    with open(binary, "rb") as f:
        add_file(f"/usr/local/bin/{name}", 0o755, f.read())
    for lib in libraries(binary):
        with open(os.path.realpath(lib), "rb") as f:
            add_file(lib, 0o755, f.read())
    if os.path.exists(CA_BUNDLE):
        with open(CA_BUNDLE, "rb") as f:
            add_file(CA_BUNDLE, 0o644, f.read())
    add_file("/etc/passwd", 0o644, PASSWD.encode())
    add_file("/etc/group", 0o644, GROUP.encode())
    entries["tmp"] = (0o1777, None)
    entries["home/nonroot"] = (0o755, None)
    entries.setdefault("home", (0o755, None))

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(entries):
            mode, data = entries[path]
            info = tarfile.TarInfo(path)
            info.mtime = epoch
            info.mode = mode
            info.uid = info.gid = 65532 if path == "home/nonroot" else 0
            info.uname = info.gname = ""
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def blob(out, data):
    """Writes `data` as a blob of the layout; its descriptor's digest and size."""
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(out, "blobs", "sha256", digest)
    with open(path, "wb") as f:
        f.write(data)
    return f"sha256:{digest}", len(data)


def architecture():
    """This machine's architecture as OCI names it."""
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--name", required=True, help="the binary's name in the image")
    p.add_argument("--tag", required=True)
    p.add_argument("--user", default="", help="uid:gid the image runs as (empty: root)")
    p.add_argument("--out", required=True, help="the OCI layout directory (replaced)")
    p.add_argument("--label", action="append", default=[], help="key=value, repeatable")
    args = p.parse_args()

    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", args.tag):
        sys.exit(f"oci.py: {args.tag!r} is not a valid tag")
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    labels = dict(label.split("=", 1) for label in args.label)
    labels.setdefault("org.opencontainers.image.created", created)

    if os.path.exists(args.out):
        for root, dirs, files in os.walk(args.out, topdown=False):
            for f in files:
                os.remove(os.path.join(root, f))
            for d in dirs:
                os.rmdir(os.path.join(root, d))
    os.makedirs(os.path.join(args.out, "blobs", "sha256"), exist_ok=True)

    tar = layer(args.binary, args.name, epoch)
    compressed = io.BytesIO()
    with gzip.GzipFile(fileobj=compressed, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(tar)
    layer_digest, layer_size = blob(args.out, compressed.getvalue())

    config = {
        "created": created,
        "architecture": architecture(),
        "os": "linux",
        "config": {
            "User": args.user,
            "Entrypoint": [f"/usr/local/bin/{args.name}"],
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(tar).hexdigest()}"]},
        "history": [{"created": created, "created_by": f"images/build: {args.name} and the libraries it loads"}],
    }
    config_digest, config_size = blob(args.out, canonical(config))
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": layer_digest,
            "size": layer_size,
        }],
        "annotations": labels,
    }
    manifest_digest, manifest_size = blob(args.out, canonical(manifest))
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest_size,
            "platform": {"architecture": architecture(), "os": "linux"},
            "annotations": {"org.opencontainers.image.ref.name": args.tag},
        }],
    }
    with open(os.path.join(args.out, "index.json"), "wb") as f:
        f.write(canonical(index))
    with open(os.path.join(args.out, "oci-layout"), "wb") as f:
        f.write(canonical({"imageLayoutVersion": "1.0.0"}))
    print(f"{args.out}:{args.tag} {manifest_digest} (layer {layer_size} bytes)")


if __name__ == "__main__":
    main()
